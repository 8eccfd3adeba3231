// REST API on cpp-httplib (docs/api.md has every endpoint and field):
//   GET  /health /ready /metrics /v1/models /v1/info
//   POST /v1/summarize /v1/qa /v1/completions /v1/chat/completions
// Streaming answers are Server-Sent Events. One error shape for every
// failure: {"error":{"message","type","param","code"}}.
//
// The admin server (`admin`) answers only /health, /ready and /metrics, on
// a port of its own with its own few connections, so that probes and
// scrapes are answered whatever the API port's load.
//
// Threading: each connection runs on a thread of its own, at most
// `limits.max_connections` at once (http_connection.h: the connection
// layer's caps and deadlines); a streaming client holds its thread for its
// whole stream. Request bodies are read under a hard cap (413 as soon as it
// is passed, whatever the framing). Unary requests are cancelled when their
// client disconnects, as streams are.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/api/http/http_connection.h"
#include "server/common/status.h"

namespace ropeserve::service {
class GenerationService;
}

namespace ropeserve::api {

struct ServingContext;

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 8080;
  std::size_t max_body_bytes = 1 << 20;
  // The largest upload to POST /v1/files (multipart/form-data).
  std::size_t max_file_bytes = std::size_t{100} << 20;
  // Uploads read at once (each may hold max_file_bytes in memory); more
  // are refused with 429 before their bodies are read.
  int max_concurrent_uploads = 4;
  ConnectionLimits limits;
  // TLS when both are set (PEM files).
  std::string tls_cert;
  std::string tls_key;
  // Origins allowed to call from a browser (CORS): exact origins, or "*".
  // Empty: no CORS headers, and OPTIONS answers 405.
  std::vector<std::string> allowed_origins;
  bool admin = false;  // only /health, /ready, /metrics
};

class HttpServer {
 public:
  // `context` must outlive the server.
  HttpServer(HttpServerOptions options, ServingContext& context);
  ~HttpServer();

  // Binds the port: an error if it is taken or TLS files are bad.
  Status Bind();
  // Serves until Stop() (binding first if Bind was not called). Blocking.
  Status Serve();
  // Safe from any thread; makes Serve() return. Call after draining: open
  // streams are cut.
  void Stop();
  // The bound port (useful with port 0 in tests); valid once listening.
  int port() const;
  bool listening() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Exposed for tests: handles a unary /v1/completions or /v1/chat/completions
// body, returns (status, body).
std::pair<int, std::string> HandleCompletion(service::GenerationService& service, const std::string& body);
std::pair<int, std::string> HandleChatCompletion(service::GenerationService& service, const std::string& body);

}  // namespace ropeserve::api
