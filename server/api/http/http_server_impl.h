// What http_server.cc and the API routes it installs (http_api_routes.cc)
// share: HttpServer::Impl and the helpers its handlers call. Private to
// those two files.
#pragma once

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/api/error_mapping.h"
#include "server/api/http/http_server.h"
#include "server/api/http/routes.h"
#include "server/api/lifecycle.h"
#include "server/api/observability/tracing.h"
#include "server/api/rest/rest_handlers.h"
#include "server/api/serving_context.h"

namespace ropeserve::api {

namespace http_detail {

// Per-request data the access log needs; cpp-httplib runs a request's
// routing, handler, response writing and logger on one worker thread.
struct RequestInfo {
  std::chrono::steady_clock::time_point start;
  std::string id;
  std::string user;                          // the body's `user` (OpenAI), when it has one
  std::string owner;                         // the API key's digest ("" when keys are off)
  std::string path_id;                       // the path's {response_id}
  ServerSpan span;                           // the request's trace (from its traceparent, else new)
  ApiDialect dialect = ApiDialect::kOpenAI;  // the route's error shape
};
// This worker thread's request.
RequestInfo& CurrentRequest();

// The error as the route's dialect writes it (status from its code unless given).
void SetError(httplib::Response& res, const Status& s, int http_status = 0);
// The body of a POST, read under `max` bytes whatever its framing
// (Content-Length, chunked, read to close, compressed); nullopt after
// writing the error (413 past the cap, 408 when it arrived too slowly, 400
// when its framing is broken). The connection closes after an error: the
// rest of the body is never read.
std::optional<std::string> ReadBody(const httplib::ContentReader& reader, std::size_t max, httplib::Response& res);

using Endpoint = StatusOr<RestReply> (*)(service::GenerationService&, const RestRequest&);

}  // namespace http_detail

struct HttpServer::Impl {
  HttpServerOptions options;
  ServingContext& ctx;
  std::unique_ptr<httplib::Server> server;
  std::atomic<int> port{0};
  int listen_fd = -1;  // the listening socket, seen through set_socket_options
  // Stop() may come before Serve() has started listening (a model that
  // fails to load at once): cpp-httplib's stop() is a no-op then, and the
  // server would listen forever. See Serve / Stop.
  std::atomic<bool> serve_called{false}, serve_returned{false}, stop_requested{false};
  Impl(HttpServerOptions o, ServingContext& c) : options(std::move(o)), ctx(c) {}

  void Install();
  // GET /debug/kv-cache (both ports; answers with KV cache events on).
  void InstallKvCacheDebug();
  void InstallRender();
  // POST `path` runs `endpoint` on the body (Work).
  void PostWork(const char* path, http_detail::Endpoint endpoint);
  void InstallApi();
  // CORS: headers for an allowed Origin; answers preflights. True when
  // the request was answered (a preflight).
  bool Cors(const httplib::Request& req, httplib::Response& res, const Route* route);
  // Admits a work request (auth was checked before routing) and runs it;
  // a stream keeps its admission ticket until the last event is written.
  void Work(http_detail::Endpoint endpoint, const httplib::Request& req, httplib::Response& res,
            const httplib::ContentReader& reader);
  // A ticket while ready and the model is loaded; else nullopt after
  // writing the 503.
  std::optional<Lifecycle::Ticket> Admitted(httplib::Response& res);
  // The same for a request without a body (GET, DELETE).
  void Work(http_detail::Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void Run(http_detail::Endpoint endpoint, const httplib::Request& req, const std::string& body,
           Lifecycle::Ticket ticket, httplib::Response& res, const std::vector<FormPart>* form = nullptr);
  std::atomic<int> uploads{0};  // POST /v1/files being read
  // POST /v1/files: a multipart/form-data body, read under max_file_bytes.
  void Upload(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader);
  // The body size a request may have: uploads get max_file_bytes.
  std::size_t BodyLimit(const httplib::Request& req) const {
    return req.method == "POST" && req.path == "/v1/files" ? options.max_file_bytes : options.max_body_bytes;
  }
};

}  // namespace ropeserve::api
