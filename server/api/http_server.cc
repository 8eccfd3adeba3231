#include "server/api/http_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>

#include "server/api/error_mapping.h"
#include "server/api/model_service.h"

namespace ropeserve::api {

using json = nlohmann::json;

namespace {

// Typed access to optional request fields; errors name the field.
template <typename T>
Status ReadField(const json& body, const char* key, T& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return Status::Ok();
  try {
    if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean()) throw std::invalid_argument("");
    } else if constexpr (std::is_integral_v<T>) {
      if (!it->is_number_integer()) throw std::invalid_argument("");
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!it->is_number()) throw std::invalid_argument("");
    }
    out = it->get<T>();
  } catch (const std::exception&) {
    return InvalidArgument("'" + std::string(key) + "' has the wrong type: " + it->dump());
  }
  return Status::Ok();
}

StatusOr<std::vector<std::int64_t>> ReadPromptIds(const json& body) {
  auto it = body.find("prompt");
  if (it == body.end()) return InvalidArgument("'prompt' is required");
  const json* p = &*it;
  if (p->is_string() || (p->is_array() && !p->empty() && (*p)[0].is_string()))
    return Unimplemented("text prompts need the tokenizer, which is not implemented yet; send token ids");
  if (p->is_array() && p->size() == 1 && (*p)[0].is_array()) p = &(*p)[0];  // [[ids]] = one prompt
  if (!p->is_array() || p->empty()) return InvalidArgument("'prompt' must be a non-empty list of token ids");
  std::vector<std::int64_t> ids;
  for (const auto& v : *p) {
    if (v.is_array()) return Unimplemented("batched prompts are not supported yet; send one prompt per request");
    if (!v.is_number_integer()) return InvalidArgument("'prompt' must contain only integer token ids");
    ids.push_back(v.get<std::int64_t>());
  }
  return ids;
}

StatusOr<json> Complete(ModelService& service, const std::string& text) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return InvalidArgument("request body is not valid JSON");
  if (!body.is_object()) return InvalidArgument("request body must be a JSON object");
  std::string model_name;
  RS_RETURN_IF_ERROR(ReadField(body, "model", model_name));
  RS_RETURN_IF_ERROR(service.CheckModelName(model_name));
  bool stream = false;
  RS_RETURN_IF_ERROR(ReadField(body, "stream", stream));
  if (stream) return Unimplemented("streaming is not implemented yet");
  std::int64_t n = 1;
  RS_RETURN_IF_ERROR(ReadField(body, "n", n));
  if (n != 1) return Unimplemented("n > 1 is not implemented yet");
  RS_ASSIGN_OR_RETURN(auto ids, ReadPromptIds(body));

  GenerateOptions o;
  o.sampling.temperature = 1.0;  // OpenAI's default
  RS_RETURN_IF_ERROR(ReadField(body, "max_tokens", o.max_tokens));
  RS_RETURN_IF_ERROR(ReadField(body, "temperature", o.sampling.temperature));
  RS_RETURN_IF_ERROR(ReadField(body, "top_p", o.sampling.top_p));
  RS_RETURN_IF_ERROR(ReadField(body, "top_k", o.sampling.top_k));
  RS_RETURN_IF_ERROR(ReadField(body, "min_p", o.sampling.min_p));
  RS_RETURN_IF_ERROR(ReadField(body, "ignore_eos", o.ignore_eos));
  std::int64_t seed = -1;
  RS_RETURN_IF_ERROR(ReadField(body, "seed", seed));
  if (body.contains("seed") && !body["seed"].is_null()) o.sampling.seed = static_cast<std::uint64_t>(seed);
  std::int64_t logprobs = -1;
  RS_RETURN_IF_ERROR(ReadField(body, "logprobs", logprobs));
  if (logprobs > 20 || (body.contains("logprobs") && !body["logprobs"].is_null() && logprobs < 0))
    return InvalidArgument("'logprobs' must be between 0 and 20");
  o.top_logprobs = logprobs > 0 ? static_cast<std::size_t>(logprobs) : 0;

  RS_ASSIGN_OR_RETURN(GenerateResult result, service.Generate(ids, o));

  json choice = {{"index", 0}, {"text", ""}, {"token_ids", result.generated_ids},
                 {"finish_reason", result.finish_reason}, {"logprobs", nullptr}};
  if (logprobs >= 0) {
    // Tokens are shown as "token_id:N" (vLLM's return_tokens_as_token_ids
    // format) until the tokenizer can render them.
    json tokens = json::array(), token_logprobs = json::array(), top = json::array();
    for (std::size_t i = 0; i < result.generated_ids.size(); ++i) {
      tokens.push_back("token_id:" + std::to_string(result.generated_ids[i]));
      token_logprobs.push_back(result.logprobs[i]);
      json step = json::object();
      if (i < result.top_logprobs.size())
        for (const auto& t : result.top_logprobs[i]) step["token_id:" + std::to_string(t.id)] = t.logprob;
      top.push_back(step);
    }
    choice["logprobs"] = {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}};
  }
  const auto completion_tokens = result.generated_ids.size();
  return json{{"id", service.NextRequestId("cmpl")},
              {"object", "text_completion"},
              {"created", std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count()},
              {"model", service.name()},
              {"choices", json::array({choice})},
              {"usage",
               {{"prompt_tokens", ids.size()},
                {"completion_tokens", completion_tokens},
                {"total_tokens", ids.size() + completion_tokens}}}};
}

}  // namespace

std::pair<int, std::string> HandleCompletion(ModelService& service, const std::string& body) {
  auto r = Complete(service, body);
  if (!r.ok()) return {HttpStatusFor(r.status().code()), ErrorJson(r.status())};
  return {200, r->dump()};
}

struct HttpServer::Impl {
  HttpServerOptions options;
  ModelService& service;
  httplib::Server server;
  std::atomic<int> port{0};
  Impl(HttpServerOptions o, ModelService& s) : options(std::move(o)), service(s) {}
};

HttpServer::HttpServer(HttpServerOptions options, ModelService& service)
    : impl_(std::make_unique<Impl>(std::move(options), service)) {
  auto& s = impl_->server;
  Impl* impl = impl_.get();
  s.set_payload_max_length(impl->options.max_body_bytes);
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.Get("/v1/models", [impl](const httplib::Request&, httplib::Response& res) {
    const auto& c = impl->service.config();
    json model = {{"id", impl->service.name()}, {"object", "model"}, {"owned_by", "ropeserve"},
                  {"max_model_len", c.max_position_embeddings}, {"architecture", c.architecture}};
    res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(), "application/json");
  });
  s.Post("/v1/completions", [impl](const httplib::Request& req, httplib::Response& res) {
    auto [code, body] = HandleCompletion(impl->service, req.body);
    res.status = code;
    res.set_content(body, "application/json");
  });
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    Status st = res.status == 413 ? InvalidArgument("request body too large")
                : res.status == 404 ? NotFound("no such endpoint")
                                    : Status(ErrorCode::kInvalidArgument, "bad request");
    res.set_content(ErrorJson(st), "application/json");
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("request failed: {}", what);
    res.status = 500;
    res.set_content(ErrorJson(Internal("internal error")), "application/json");
  });
}

HttpServer::~HttpServer() = default;

Status HttpServer::Serve() {
  auto& s = impl_->server;
  int port = impl_->options.port;
  if (port == 0) {
    port = s.bind_to_any_port(impl_->options.host);
    if (port < 0) return Status(ErrorCode::kFailedPrecondition, "cannot bind " + impl_->options.host);
  } else if (!s.bind_to_port(impl_->options.host, port)) {
    return Status(ErrorCode::kFailedPrecondition,
                  "cannot listen on " + impl_->options.host + ":" + std::to_string(port) + " (port in use?)");
  }
  impl_->port = port;
  spdlog::info("HTTP listening on {}:{}", impl_->options.host, port);
  if (!s.listen_after_bind()) return Internal("HTTP server stopped unexpectedly");
  return Status::Ok();
}

void HttpServer::Stop() { impl_->server.stop(); }
int HttpServer::port() const { return impl_->port; }
bool HttpServer::listening() const { return impl_->server.is_running(); }

}  // namespace ropeserve::api
