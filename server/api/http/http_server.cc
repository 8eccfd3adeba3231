#include "server/api/http/http_server.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <thread>

#include "server/api/error_mapping.h"
#include "server/api/http/http_connection.h"
#include "server/api/http/http_server_impl.h"
#include "server/api/http/routes.h"
#include "server/api/observability/logging.h"
#include "server/api/rest/rest_handlers.h"
#include "server/api/serving_context.h"
#include "server/common/exception_message.h"
#include "server/service/generation_service.h"

namespace ropeserve::api {

namespace {

thread_local http_detail::RequestInfo t_request;

// The Content-Length a request announces (0 when absent or not a number;
// httplib then refuses it itself). Read here rather than with httplib's
// typed getter, which changed between Debian 12's 0.11 and Debian 13's 0.18.
std::uint64_t AnnouncedLength(const httplib::Request& req) {
  const std::string v = req.get_header_value("Content-Length");
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  return ec == std::errc() && end == v.data() + v.size() ? n : 0;
}

bool OriginAllowed(const std::vector<std::string>& allowed, const std::string& origin) {
  for (const auto& a : allowed)
    if (a == "*" || a == origin) return true;
  return false;
}

}  // namespace

namespace http_detail {

RequestInfo& CurrentRequest() { return t_request; }

void SetError(httplib::Response& res, const Status& s, int http_status) {
  res.status = http_status ? http_status : HttpStatusFor(s.code());
  // Server-side failures are logged with their cause (the client gets it too).
  if (res.status >= 500 && res.status != 503) spdlog::error("request {} failed: {}", t_request.id, s.ToString());
  if (s.code() == ErrorCode::kResourceExhausted) res.set_header("Retry-After", "1");
  if (s.code() == ErrorCode::kUnauthenticated) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(ErrorBody(t_request.dialect, s, res.status), "application/json");
}

// The body of a POST, read under `max` bytes whatever its framing
// (Content-Length, chunked, read to close, compressed); nullopt after
// writing the error (413 past the cap, 408 when it arrived too slowly, 400
// when its framing is broken). The connection closes after an error: the
// rest of the body is never read.
std::optional<std::string> ReadBody(const httplib::ContentReader& reader, std::size_t max, httplib::Response& res) {
  std::string body;
  bool too_large = false;
  const bool ok = reader([&](const char* data, size_t n) {
    if (body.size() + n > max) {
      too_large = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (ok) {
    connection::BodyRead();
    return body;
  }
  connection::CloseAfterResponse();
  if (too_large) {
    SetError(res, MalformedRequest("request body too large (the limit is " + std::to_string(max) + " bytes)"), 413);
  } else if (connection::ReadTimedOut()) {
    SetError(res, MalformedRequest("the request body did not arrive in time"), 408);
  } else {
    SetError(res, MalformedRequest("the request body could not be read (broken framing or encoding)"));
  }
  return std::nullopt;
}

}  // namespace http_detail

using http_detail::Endpoint;
using http_detail::ReadBody;
using http_detail::RequestInfo;
using http_detail::SetError;

namespace {
// (status, body) of a unary endpoint called without the HTTP server.
std::pair<int, std::string> Unary(Endpoint endpoint, service::GenerationService& service, const std::string& body) {
  auto r = endpoint(service, RestRequest{body});
  if (!r.ok()) return {HttpStatusFor(r.status().code()), ErrorJson(r.status())};
  if (r->events) return {400, ErrorJson(MalformedRequest("streaming needs the HTTP server"))};
  return {200, r->body};
}
}  // namespace

std::pair<int, std::string> HandleCompletion(service::GenerationService& service, const std::string& body) {
  return Unary(&Completions, service, body);
}

std::pair<int, std::string> HandleChatCompletion(service::GenerationService& service, const std::string& body) {
  return Unary(&ChatCompletions, service, body);
}

void HttpServer::Impl::Work(Endpoint endpoint, const httplib::Request& req, httplib::Response& res,
                            const httplib::ContentReader& reader) {
  std::optional<Lifecycle::Ticket> ticket = Admitted(res);
  if (!ticket) return;
  std::optional<std::string> body = ReadBody(reader, options.max_body_bytes, res);
  if (!body) return;
  Run(endpoint, req, *body, std::move(*ticket), res);
}

std::optional<Lifecycle::Ticket> HttpServer::Impl::Admitted(httplib::Response& res) {
  auto ticket = ctx.lifecycle.Admit();
  if (!ticket.ok()) {
    SetError(res, ticket.status());
    return std::nullopt;
  }
  // Every endpoint admitted here runs on the generation model (the Files
  // and Batch APIs feed it): 503 while loading, 501 without one, before
  // the body (an upload's included) is read.
  if (auto service = ctx.LoadedService(); !service.ok()) {
    SetError(res, service.status());
    return std::nullopt;
  }
  return std::move(*ticket);
}

void HttpServer::Impl::Work(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  std::optional<Lifecycle::Ticket> ticket = Admitted(res);
  if (!ticket) return;
  Run(endpoint, req, "", std::move(*ticket), res);
}

void HttpServer::Impl::Upload(const httplib::Request& req, httplib::Response& res,
                              const httplib::ContentReader& reader) {
  std::optional<Lifecycle::Ticket> ticket = Admitted(res);
  if (!ticket) return;
  // Each upload may hold max_file_bytes: a few at a time, whatever the
  // number of connections.
  struct Slot {
    std::atomic<int>& n;
    ~Slot() { --n; }
  } slot{uploads};
  if (++uploads > options.max_concurrent_uploads) {
    connection::CloseAfterResponse();
    return SetError(res, Status(ErrorCode::kResourceExhausted, "too many uploads in progress (at most " +
                                                                   std::to_string(options.max_concurrent_uploads) +
                                                                   "): retry later"));
  }
  if (!req.is_multipart_form_data()) {
    connection::CloseAfterResponse();
    return SetError(res, MalformedRequest("POST /v1/files takes multipart/form-data with the fields 'file' and "
                                          "'purpose'"));
  }
  std::vector<FormPart> parts;
  std::size_t total = 0;
  bool too_large = false, too_many = false;
  const bool ok = reader(
      [&](const httplib::MultipartFormData& part) {
        if (parts.size() >= 16) {
          too_many = true;
          return false;
        }
        parts.push_back({part.name, part.filename, ""});
        return true;
      },
      [&](const char* data, size_t n) {
        if (parts.empty()) return false;
        total += n;
        if (total > options.max_file_bytes) {
          too_large = true;
          return false;
        }
        parts.back().content.append(data, n);
        return true;
      });
  if (!ok) {
    connection::CloseAfterResponse();
    if (too_large)
      return SetError(res,
                      MalformedRequest("the upload is too large (the limit is " +
                                       std::to_string(options.max_file_bytes) + " bytes: serve --max-file-bytes)"),
                      413);
    if (too_many) return SetError(res, MalformedRequest("the form has more than 16 fields"));
    if (connection::ReadTimedOut()) return SetError(res, MalformedRequest("the upload did not arrive in time"), 408);
    return SetError(res, MalformedRequest("the multipart/form-data body could not be read"));
  }
  connection::BodyRead();
  Run(&UploadFile, req, "", std::move(*ticket), res, &parts);
}

void HttpServer::Impl::Run(Endpoint endpoint, const httplib::Request& req, const std::string& body,
                           Lifecycle::Ticket ticket, httplib::Response& res, const std::vector<FormPart>* form) {
  service::GenerationService* service = ctx.service.load();  // Admitted checked it
  // A unary request whose client goes away is cancelled (streams notice
  // it when writing).
  std::vector<std::pair<std::string, std::string>> query(req.params.begin(), req.params.end());
  auto reply =
      endpoint(*service, RestRequest{body, ctx.request_timeout_seconds, &connection::ClientGone, &t_request.user,
                                     t_request.span.context, ctx.responses.get(), t_request.owner, t_request.path_id,
                                     std::move(query), &ctx.lifecycle, ctx.files, form, ctx.batches});
  if (!reply.ok()) return SetError(res, reply.status());
  if (!reply->events) {
    res.set_content(reply->body, reply->content_type);
    return;
  }
  // Server-Sent Events. The provider waits for output in short slices and
  // checks the connection between them, so a client that goes away cancels
  // its requests within a fraction of a second.
  std::shared_ptr<EventSource> events = std::move(reply->events);
  auto held = std::make_shared<Lifecycle::Ticket>(std::move(ticket));
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [events, held](size_t, httplib::DataSink& sink) {
        std::string out;
        const bool done = events->Poll(out, std::chrono::milliseconds(200));
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          events->Cancel();
          return false;
        }
        if (done) {
          sink.done();
          return true;
        }
        if (out.empty() && !sink.is_writable()) {
          events->Cancel();
          return false;
        }
        return true;
      },
      [events](bool success) {
        if (!success) events->Cancel();
      });
}

bool HttpServer::Impl::Cors(const httplib::Request& req, httplib::Response& res, const Route* route) {
  const std::string origin = req.get_header_value("Origin");
  const bool allowed = !origin.empty() && OriginAllowed(options.allowed_origins, origin);
  if (allowed) {
    const bool any =
        OriginAllowed({"*"}, "") && options.allowed_origins.size() == 1 && options.allowed_origins[0] == "*";
    res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
    if (!any) res.set_header("Vary", "Origin");
    res.set_header("Access-Control-Expose-Headers", "x-request-id, Retry-After");
  }
  if (req.method != "OPTIONS" || options.allowed_origins.empty() || route == nullptr) return false;
  // A preflight: which method and headers a browser may use here.
  if (!allowed) {
    SetError(res, Status(ErrorCode::kUnauthenticated, "origin '" + origin.substr(0, 200) + "' is not allowed"), 403);
    return true;
  }
  res.status = 204;
  res.set_header("Access-Control-Allow-Methods", AllowedMethods(*route) + ", OPTIONS");
  res.set_header("Access-Control-Allow-Headers",
                 "Authorization, Content-Type, X-Request-Id, X-Api-Key, Anthropic-Version, Anthropic-Beta");
  res.set_header("Access-Control-Max-Age", "600");
  return true;
}

void HttpServer::Impl::InstallKvCacheDebug() {
  // The block hashes the prefix cache holds, ascending: what the KV cache
  // events, replayed in order, give (a subscriber checks itself against
  // it). Only with events on: the hashes are published then anyway.
  server->Get("/debug/kv-cache", [this](const httplib::Request&, httplib::Response& res) {
    if (!ctx.kv_events)
      return SetError(res, NotFound("the KV cache's contents are listed only with --kv-events-endpoint"));
    auto service = ctx.LoadedService();
    if (!service.ok()) return SetError(res, service.status());
    auto contents = (*service)->engine().CacheContents();
    if (!contents.ok()) return SetError(res, contents.status());
    nlohmann::json body = {{"model", (*service)->name()},
                           {"block_size", (*service)->block_size()},
                           {"num_blocks", (*service)->kv_cache().num_blocks},
                           {"block_hashes", contents->cached},
                           {"offload_blocks", (*service)->kv_offload().num_blocks},
                           {"offloaded_block_hashes", contents->offloaded}};
    res.set_content(body.dump(), "application/json");
  });
}

void HttpServer::Impl::PostWork(const char* path, Endpoint endpoint) {
  server->Post(path, [this, endpoint](const httplib::Request& req, httplib::Response& res,
                                      const httplib::ContentReader& reader) { Work(endpoint, req, res, reader); });
}

void HttpServer::Impl::InstallRender() {
  // vLLM's render endpoints, on the admin port too (without a key there:
  // llm-d's router calls them from inside the cluster and sends none).
  PostWork("/v1/completions/render", &RenderCompletions);
  PostWork("/v1/chat/completions/render", &RenderChatCompletions);
}

void HttpServer::Impl::Install() {
  auto& s = *server;
  // The connection layer caps bodies while they are read (ReadBody: 413);
  // this is httplib's own cap for bodies it would read itself (no route
  // reads one). Above ours, so that ours is met first: cpp-httplib 0.18
  // (Debian 13) also applies it while a chunked body is read, and a body it
  // stops cannot be told from broken framing (400).
  s.set_payload_max_length(std::max(2 * options.max_body_bytes, options.max_file_bytes) + (std::size_t{16} << 20));
  // cpp-httplib's defaults are SO_REUSEPORT (a second server on the same
  // port would silently share it) and a listen backlog of 5 (a burst of
  // connections then waits for SYN retries, ~1 s each). Use SO_REUSEADDR,
  // keep the socket, and raise the backlog after binding (Bind()).
  s.set_socket_options([this](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = sock;
  });
  // A body announced larger than the cap is refused before it is sent.
  s.set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (AnnouncedLength(req) > BodyLimit(req)) {
      SetError(res, MalformedRequest("request body too large"), 413);
      return 413;
    }
    return 100;
  });

  // Before routing (and before any body is read): request id, 404, CORS,
  // 405, bodies announced too large, API keys on /v1/*.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    using Handled = httplib::Server::HandlerResponse;
    t_request.start = std::chrono::steady_clock::now();
    t_request.id = RequestIdOrNew(req.get_header_value("x-request-id"));
    t_request.user.clear();
    t_request.owner.clear();
    t_request.path_id.clear();
    t_request.dialect = ApiDialect::kOpenAI;
    res.set_header("x-request-id", t_request.id);
    t_request.span = OpenServerSpan(ctx.tracer, req.get_header_value("traceparent"));
    res.set_header("traceresponse", t_request.span.TraceResponse());
    const Route* route = FindRoute(req.path, options.admin, req.method, &t_request.path_id);
    if (route == nullptr) {
      SetError(res, NotFound("no such endpoint: " + req.path.substr(0, 200)));
      return Handled::Handled;
    }
    t_request.dialect = route->dialect;
    if (Cors(req, res, route)) return Handled::Handled;
    if (req.method != route->method && !(req.method == "HEAD" && std::string(route->method) == "GET")) {
      const std::string allow = AllowedMethods(*route);
      res.set_header("Allow", allow);
      SetError(res,
               MalformedRequest(req.method + " is not allowed on " + req.path.substr(0, 200) + " (use " + allow + ")"),
               405);
      return Handled::Handled;
    }
    if (AnnouncedLength(req) > BodyLimit(req)) {
      SetError(res,
               MalformedRequest("request body too large (the limit is " + std::to_string(BodyLimit(req)) + " bytes)"),
               413);
      return Handled::Handled;
    }
    if (route->auth && !(options.admin && route->admin_open)) {
      // Anthropic's SDKs send the key as x-api-key; OpenAI's as a bearer token.
      std::string authorization = req.get_header_value("Authorization");
      if (authorization.empty() && req.has_header("x-api-key"))
        authorization = "Bearer " + req.get_header_value("x-api-key");
      if (Status a = ctx.api_keys.Check(authorization); !a.ok()) {
        SetError(res, a);
        return Handled::Handled;
      }
      t_request.owner = ctx.api_keys.Owner(authorization);
    }
    return Handled::Unhandled;
  });

  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.Get("/ready", [this](const httplib::Request&, httplib::Response& res) {
    switch (ctx.lifecycle.state()) {
      case Lifecycle::State::kReady:
        res.set_content(R"({"status":"ready"})", "application/json");
        return;
      case Lifecycle::State::kLoading:
        return SetError(res, Unavailable("loading"));
      case Lifecycle::State::kDraining:
        return SetError(res, Unavailable("draining"));
    }
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (ctx.metrics == nullptr) return SetError(res, NotFound("metrics are disabled"));
    res.set_content(ctx.metrics->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  InstallKvCacheDebug();
  InstallRender();
  if (!options.admin) InstallApi();

  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) return SetError(res, NotFound("no such endpoint: " + req.path.substr(0, 200)));
    // 413 (body over --max-body-bytes), 415 (unknown Content-Encoding)
    // and other protocol-level errors.
    SetError(res, MalformedRequest(res.status == 413 ? "request body too large" : "bad request"), res.status);
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = ExceptionMessage(e);  // without LibTorch's stack trace, capped
    } catch (...) {
    }
    spdlog::error("request failed: {}", what);
    SetError(res, Internal("internal error"));
  });
  // One access-log line and one requests_total increment per request (for
  // a stream, after its last event). Keys and bodies are never logged.
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_request.start).count();
    const Route* route = FindRoute(req.path, options.admin, req.method);
    const std::string endpoint = route != nullptr ? route->path : "other";
    if (ctx.metrics != nullptr) ctx.metrics->CountRequest(endpoint, "http", std::to_string(res.status));
    if (route != nullptr && route->admin && res.status < 400) return;  // probes and scrapes: counted, not logged
    nlohmann::ordered_json fields = {{"method", req.method},
                                     {"path", req.path.substr(0, 200)},
                                     {"status", res.status},
                                     {"duration_ms", std::round(ms * 100) / 100},
                                     {"request_id", t_request.id},
                                     {"trace_id", t_request.span.context.TraceIdHex()},
                                     {"span_id", t_request.span.context.SpanIdHex()},
                                     {"remote", req.remote_addr}};
    if (!t_request.user.empty()) fields["user"] = t_request.user.substr(0, 200);
    LogAccess("http request", fields);
    if (ctx.tracer != nullptr)
      ctx.tracer->EndServerSpan(t_request.span, req.method + " " + endpoint,
                                {{"http.request.method", req.method},
                                 {"url.path", req.path.substr(0, 200)},
                                 {"http.response.status_code", static_cast<std::int64_t>(res.status)},
                                 {"ropeserve.request_id", t_request.id}},
                                res.status >= 500);
  });
}

Status HttpServer::Bind() {
  auto& s = *impl_->server;
  if (impl_->port != 0) return Status::Ok();
  if (!s.is_valid()) return InvalidArgument("cannot load the TLS certificate or key (--tls-cert / --tls-key)");
  int port = impl_->options.port;
  if (port == 0) {
    port = s.bind_to_any_port(impl_->options.host);
    if (port < 0) return FailedPrecondition("cannot bind " + impl_->options.host);
  } else if (!s.bind_to_port(impl_->options.host, port)) {
    return FailedPrecondition("cannot listen on " + impl_->options.host + ":" + std::to_string(port) +
                              " (port in use?)");
  }
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, SOMAXCONN);  // Linux updates the backlog
  impl_->port = port;
  spdlog::info("HTTP{}{} listening on {}:{}", impl_->options.tls_cert.empty() ? "" : "S",
               impl_->options.admin ? " (admin: /health, /ready, /metrics, the render endpoints)" : "",
               impl_->options.host, port);
  return Status::Ok();
}

Status HttpServer::Serve() {
  struct Returned {
    std::atomic<bool>& flag;
    ~Returned() { flag = true; }
  } returned{impl_->serve_returned};
  RS_RETURN_IF_ERROR(Bind());
  // Paired with Stop (both seq_cst): either this sees the stop request, or
  // Stop sees this call and waits until listening to stop it.
  impl_->serve_called = true;
  if (impl_->stop_requested) return Status::Ok();
  if (!impl_->server->listen_after_bind()) {
    return impl_->stop_requested ? Status::Ok() : Internal("HTTP server stopped unexpectedly");
  }
  return Status::Ok();
}

void HttpServer::Stop() {
  impl_->stop_requested = true;
  if (impl_->serve_called) {
    while (!impl_->server->is_running() && !impl_->serve_returned)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->server->stop();
}
int HttpServer::port() const { return impl_->port; }
bool HttpServer::listening() const { return impl_->server->is_running(); }

}  // namespace ropeserve::api
