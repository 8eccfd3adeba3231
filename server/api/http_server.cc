#include "server/api/http_server.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <thread>

#include "kernels/cpu/kernel_config.h"
#include "server/api/error_mapping.h"
#include "server/api/http_connection.h"
#include "server/api/logging.h"
#include "server/api/openapi.h"
#include "server/api/rest_handlers.h"
#include "server/api/routes.h"
#include "server/api/serving_context.h"
#include "server/common/exception_message.h"
#include "server/service/generation_service.h"

namespace ropeserve::api {

using json = nlohmann::json;

namespace {

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
thread_local RequestInfo t_request;

void SetError(httplib::Response& res, const Status& s, int http_status = 0) {
  res.status = http_status ? http_status : HttpStatusFor(s.code());
  // Server-side failures are logged with their cause (the client gets it too).
  if (res.status >= 500 && res.status != 503) spdlog::error("request {} failed: {}", t_request.id, s.ToString());
  if (s.code() == ErrorCode::kResourceExhausted) res.set_header("Retry-After", "1");
  if (s.code() == ErrorCode::kUnauthenticated) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(ErrorBody(t_request.dialect, s, res.status), "application/json");
}

// The Content-Length a request announces (0 when absent or not a number;
// httplib then refuses it itself). Read here rather than with httplib's
// typed getter, which changed between Debian 12's 0.11 and Debian 13's 0.18.
std::uint64_t AnnouncedLength(const httplib::Request& req) {
  const std::string v = req.get_header_value("Content-Length");
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  return ec == std::errc() && end == v.data() + v.size() ? n : 0;
}

using Endpoint = StatusOr<RestReply> (*)(service::GenerationService&, const RestRequest&);

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

bool OriginAllowed(const std::vector<std::string>& allowed, const std::string& origin) {
  for (const auto& a : allowed)
    if (a == "*" || a == origin) return true;
  return false;
}

// What /v1/models and /v1/info say of an encoder beyond its name: an
// embedder's dimensions and pooling, a classifier's labels and activations
// (a token classifier's labels).
nlohmann::json EncoderFields(const service::EncoderService& e) {
  if (e.embeds())
    return {{"dimensions", e.dimensions()},
            {"pooling", embedding::PoolingName(e.pooling().pooling)},
            {"pooling_source", e.pooling().source}};
  if (e.classifies_tokens()) return {{"labels", e.config().labels}};
  return {{"labels", e.config().labels},
          {"activation", ScoreActivationName(e.config().classify_activation)},
          {"score_activation", ScoreActivationName(e.config().score_activation)}};
}

}  // namespace

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
  void InstallApi();
  // CORS: headers for an allowed Origin; answers preflights. True when
  // the request was answered (a preflight).
  bool Cors(const httplib::Request& req, httplib::Response& res, const Route* route);
  // Admits a work request (auth was checked before routing) and runs it;
  // a stream keeps its admission ticket until the last event is written.
  void Work(Endpoint endpoint, const httplib::Request& req, httplib::Response& res,
            const httplib::ContentReader& reader);
  // A ticket while ready and the model is loaded; else nullopt after
  // writing the 503.
  std::optional<Lifecycle::Ticket> Admitted(httplib::Response& res);
  // The same for a request without a body (GET, DELETE).
  void Work(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void Run(Endpoint endpoint, const httplib::Request& req, const std::string& body, Lifecycle::Ticket ticket,
           httplib::Response& res, const std::vector<FormPart>* form = nullptr);
  std::atomic<int> uploads{0};  // POST /v1/files being read
  // POST /v1/files: a multipart/form-data body, read under max_file_bytes.
  void Upload(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader);
  // The body size a request may have: uploads get max_file_bytes.
  std::size_t BodyLimit(const httplib::Request& req) const {
    return req.method == "POST" && req.path == "/v1/files" ? options.max_file_bytes : options.max_body_bytes;
  }
};

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
  if (ctx.service.load() == nullptr) {
    SetError(res, Unavailable("the server is still loading its models"));
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
  service::GenerationService* service = ctx.service.load();
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
    if (route->auth) {
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

void HttpServer::Impl::InstallApi() {
  auto& s = *server;
  s.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"version", ROPESERVE_VERSION}}.dump(), "application/json");
  });
  s.Get("/openapi.json", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(OpenApiDocument(), "application/json");
  });
  // The playground: no inline code, so the policy allows only this origin's
  // files and API; nothing may frame it.
  auto page = [](const std::string& (*text)(), const char* type) {
    return [text, type](const httplib::Request&, httplib::Response& res) {
      res.set_header(
          "Content-Security-Policy",
          "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
          "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Referrer-Policy", "no-referrer");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(text(), type);
    };
  };
  s.Get("/", page(&PlaygroundHtml, "text/html; charset=utf-8"));
  s.Get("/playground/app.js", page(&PlaygroundJs, "text/javascript; charset=utf-8"));
  s.Get("/playground/style.css", page(&PlaygroundCss, "text/css; charset=utf-8"));
  // Every served model: the decoder, the QA model and the embedders when there are
  // (`task` and `max_model_len` are extensions, as vLLM's max_model_len).
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    service::GenerationService* service = ctx.service.load();
    if (service == nullptr) return SetError(res, Unavailable("the server is still loading its models"));
    auto card = [](const std::string& id, const char* task, std::int64_t max_len, const std::string& arch) {
      return json{{"id", id},     {"object", "model"},        {"created", 0},        {"owned_by", "ropeserve"},
                  {"task", task}, {"max_model_len", max_len}, {"architecture", arch}};
    };
    json data =
        json::array({card(service->name(), "generate", service->max_model_len(), service->config().architecture)});
    if (service::QaService* qa = ctx.qa.load())
      data.push_back(
          card(qa->name(), "question-answering", qa->config().max_position_embeddings, qa->config().architecture));
    if (const auto* embedders = ctx.encoders.load())
      for (service::EncoderService* e : *embedders) {
        json c = card(e->name(), e->task(), e->max_input_tokens(), e->config().architecture);
        c.update(EncoderFields(*e));
        data.push_back(std::move(c));
      }
    res.set_content(json{{"object", "list"}, {"data", std::move(data)}}.dump(), "application/json");
  });
  s.Get("/v1/info", [this](const httplib::Request&, httplib::Response& res) {
    service::GenerationService* service = ctx.service.load();
    if (service == nullptr) return SetError(res, Unavailable("the server is still loading its models"));
    const EngineConfig& o = service->engine_config();
    json info = {{"model", service->name()},
                 {"architecture", service->config().architecture},
                 {"dtype", service->dtype()},
                 {"quantization", service->quantization()},
                 {"device", service->device()},
                 {"tokenizer", service->tokenizer() != nullptr},
                 {"vocab_size", service->config().vocab_size},
                 {"max_model_len", service->max_model_len()},
                 {"kv_cache",
                  {{"block_size", o.block_size},
                   {"num_blocks", service->kv_cache().num_blocks},
                   {"tokens", service->kv_cache().tokens},
                   {"bytes", service->kv_cache().bytes}}},
                 {"limits",
                  {{"max_num_seqs", o.scheduler.max_num_seqs},
                   {"max_num_batched_tokens", o.scheduler.max_num_batched_tokens},
                   {"max_queue_requests", o.scheduler.max_waiting_requests},
                   {"max_queue_tokens", o.scheduler.max_waiting_tokens},
                   {"max_request_tokens", service->limits().max_request_tokens},
                   {"max_document_bytes", service->limits().max_document_bytes},
                   {"max_body_bytes", options.max_body_bytes},
                   {"max_connections", options.limits.max_connections},
                   {"request_timeout_seconds", ctx.request_timeout_seconds}}},
                 {"qa", nullptr}};
    json kernels = json::object();
    for (const auto& [name, value] : cpu::DescribeKernelConfig(cpu::GetKernelConfig())) kernels[name] = value;
    info["kernels"] = std::move(kernels);
    if (service::QaService* qa = ctx.qa.load()) {
      info["qa"] = {{"model", qa->name()},
                    {"architecture", qa->config().architecture},
                    {"max_position_embeddings", qa->config().max_position_embeddings}};
    }
    json embedders = json::array();
    json classifiers = json::array();
    if (const auto* list = ctx.encoders.load())
      for (service::EncoderService* e : *list) {
        json one = {{"model", e->name()},
                    {"architecture", e->config().architecture},
                    {"max_input_tokens", e->max_input_tokens()}};
        one.update(EncoderFields(*e));
        (e->embeds() ? embedders : classifiers).push_back(std::move(one));
      }
    info["embedding"] = std::move(embedders);
    info["classification"] = std::move(classifiers);
    res.set_content(info.dump(), "application/json");
  });
  auto post = [this](const char* path, Endpoint endpoint) {
    server->Post(path, [this, endpoint](const httplib::Request& req, httplib::Response& res,
                                        const httplib::ContentReader& reader) { Work(endpoint, req, res, reader); });
  };
  post("/v1/completions", &Completions);
  post("/v1/chat/completions", &ChatCompletions);
  post("/v1/messages", &Messages);
  post("/v1/messages/count_tokens", &CountMessageTokens);
  post("/v1/responses", &CreateResponse);
  // Cancel takes no body (the SDK may send none at all).
  server->Post(R"(/v1/responses/([A-Za-z0-9_-]+)/cancel)",
               [this](const httplib::Request& req, httplib::Response& res) { Work(&CancelResponse, req, res); });
  server->Post("/v1/files", [this](const httplib::Request& req, httplib::Response& res,
                                   const httplib::ContentReader& reader) { Upload(req, res, reader); });
  server->Get("/v1/files", [this](const httplib::Request& req, httplib::Response& res) { Work(&ListFiles, req, res); });
  server->Get(R"(/v1/files/([A-Za-z0-9_-]+)/content)",
              [this](const httplib::Request& req, httplib::Response& res) { Work(&FileContent, req, res); });
  server->Get(R"(/v1/files/([A-Za-z0-9_-]+))",
              [this](const httplib::Request& req, httplib::Response& res) { Work(&RetrieveFile, req, res); });
  server->Delete(R"(/v1/files/([A-Za-z0-9_-]+))",
                 [this](const httplib::Request& req, httplib::Response& res) { Work(&DeleteFile, req, res); });
  post("/v1/batches", &CreateBatch);
  server->Get("/v1/batches",
              [this](const httplib::Request& req, httplib::Response& res) { Work(&ListBatches, req, res); });
  // Cancel takes no body (the SDK sends none).
  server->Post(R"(/v1/batches/([A-Za-z0-9_-]+)/cancel)",
               [this](const httplib::Request& req, httplib::Response& res) { Work(&CancelBatch, req, res); });
  server->Get(R"(/v1/batches/([A-Za-z0-9_-]+))",
              [this](const httplib::Request& req, httplib::Response& res) { Work(&RetrieveBatch, req, res); });
  server->Get(R"(/v1/responses/([A-Za-z0-9_-]+)/input_items)",
              [this](const httplib::Request& req, httplib::Response& res) { Work(&ListInputItems, req, res); });
  server->Get(R"(/v1/responses/([A-Za-z0-9_-]+))",
              [this](const httplib::Request& req, httplib::Response& res) { Work(&RetrieveResponse, req, res); });
  server->Delete(R"(/v1/responses/([A-Za-z0-9_-]+))",
                 [this](const httplib::Request& req, httplib::Response& res) { Work(&DeleteResponse, req, res); });
  post("/v1/summarize", &Summarize);
  post("/tokenize", &Tokenize);
  post("/detokenize", &Detokenize);
  s.Post("/v1/qa", [this](const httplib::Request&, httplib::Response& res, const httplib::ContentReader& reader) {
    auto ticket = ctx.lifecycle.Admit();
    if (!ticket.ok()) return SetError(res, ticket.status());
    service::QaService* qa = ctx.qa.load();
    if (qa == nullptr) return SetError(res, Unimplemented("no QA model is loaded (serve --qa DIR)"));
    std::optional<std::string> body = ReadBody(reader, options.max_body_bytes, res);
    if (!body) return;
    const std::vector<service::EncoderService*>* encoders = ctx.encoders.load();
    auto reply = AnswerQuestions(
        *qa, RestRequest{*body, ctx.request_timeout_seconds, &connection::ClientGone, nullptr, t_request.span.context},
        encoders == nullptr ? std::vector<service::EncoderService*>() : *encoders);
    if (!reply.ok()) return SetError(res, reply.status());
    res.set_content(reply->body, "application/json");
  });
  // The encoders' endpoints (serve --encoder): embeddings, classification,
  // pair scoring; each picks the encoder its body's `model` names.
  using EncoderHandler =
      std::function<StatusOr<RestReply>(const std::vector<service::EncoderService*>&, const RestRequest&)>;
  auto encoder_route = [this, &s](const char* path, EncoderHandler handle) {
    s.Post(path, [this, handle](const httplib::Request&, httplib::Response& res, const httplib::ContentReader& reader) {
      auto ticket = ctx.lifecycle.Admit();
      if (!ticket.ok()) return SetError(res, ticket.status());
      const std::vector<service::EncoderService*>* encoders = ctx.encoders.load();
      if (encoders == nullptr || encoders->empty())
        return SetError(res, Unimplemented("no encoder is loaded (serve --encoder DIR)"));
      std::optional<std::string> body = ReadBody(reader, options.max_body_bytes, res);
      if (!body) return;
      auto reply = handle(*encoders, RestRequest{*body, ctx.request_timeout_seconds, &connection::ClientGone, nullptr,
                                                 t_request.span.context});
      if (!reply.ok()) return SetError(res, reply.status());
      res.set_content(reply->body, "application/json");
    });
  };
  using std::placeholders::_1;
  using std::placeholders::_2;
  encoder_route("/v1/embeddings", std::bind(CreateEmbeddings, _1, _2, false));
  encoder_route("/embed", std::bind(CreateEmbeddings, _1, _2, true));
  for (const char* path : {"/classify", "/v1/classify"}) encoder_route(path, std::bind(Classify, _1, _2, false));
  encoder_route("/predict", std::bind(Classify, _1, _2, true));
  for (const char* path : {"/score", "/v1/score"}) encoder_route(path, std::bind(ScoreDocuments, _1, _2, false));
  for (const char* path : {"/rerank", "/v1/rerank", "/v2/rerank"})
    encoder_route(path, std::bind(ScoreDocuments, _1, _2, true));
  encoder_route("/v1/token-classify", ClassifyTokens);
}

HttpServer::HttpServer(HttpServerOptions options, ServingContext& context)
    : impl_(std::make_unique<Impl>(std::move(options), context)) {
  impl_->server = MakeGuardedServer(impl_->options.limits, impl_->options.tls_cert, impl_->options.tls_key);
  impl_->Install();
}

HttpServer::~HttpServer() = default;

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
               impl_->options.admin ? " (admin: /health, /ready, /metrics)" : "", impl_->options.host, port);
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
