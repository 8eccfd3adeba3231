// REST API on cpp-httplib. For now a minimal, honest subset while the
// batching engine is built: health, model list, and OpenAI-style
// /v1/completions with token-id prompts, served one request at a time.
// Threading: cpp-httplib's worker threads call the handlers; ModelService
// serialises generation.
#pragma once

#include <memory>
#include <string>

#include "server/common/status.h"

namespace ropeserve::api {

class ModelService;

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 8080;
  std::size_t max_body_bytes = 1 << 20;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, ModelService& service);
  ~HttpServer();

  // Binds the port (error if taken), then serves until Stop(). Blocking.
  Status Serve();
  // Safe from any thread; makes Serve() return after in-flight requests.
  void Stop();
  // The bound port (useful with port 0 in tests); valid once listening.
  int port() const;
  bool listening() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Exposed for tests: handles a /v1/completions body, returns (status, body).
std::pair<int, std::string> HandleCompletion(ModelService& service, const std::string& body);
std::pair<int, std::string> HandleChatCompletion(ModelService& service, const std::string& body);

}  // namespace ropeserve::api
