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

// `prompt`: a string (tokenized with the model's tokenizer, special tokens
// added as its post-processor says), a list of token ids, or a list
// holding one of either.
StatusOr<std::vector<std::int64_t>> ReadPrompt(ModelService& service, const json& body) {
  auto it = body.find("prompt");
  if (it == body.end()) return InvalidArgument("'prompt' is required");
  const json* p = &*it;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_array() || (*p)[0].is_string())) p = &(*p)[0];
  if (p->is_string()) {
    RS_ASSIGN_OR_RETURN(auto ids, service.Tokenize(p->get<std::string>(), /*add_special_tokens=*/true));
    if (ids.empty()) return InvalidArgument("'prompt' tokenizes to no tokens");
    return ids;
  }
  if (!p->is_array() || p->empty()) return InvalidArgument("'prompt' must be a string or a non-empty list of token ids");
  std::vector<std::int64_t> ids;
  for (const auto& v : *p) {
    if (v.is_array() || v.is_string()) {
      return Unimplemented("batched prompts are not supported yet; send one prompt per request");
    }
    if (!v.is_number_integer()) return InvalidArgument("'prompt' must contain only integer token ids");
    ids.push_back(v.get<std::int64_t>());
  }
  return ids;
}

// The sampling and stopping fields shared by completions and chat.
struct Common {
  GenerateOptions options;
  std::int64_t logprobs = -1;  // -1 = not requested
  std::int64_t n = 1;
};

StatusOr<Common> ReadCommon(ModelService& service, const json& body, bool chat) {
  std::string model_name;
  RS_RETURN_IF_ERROR(ReadField(body, "model", model_name));
  RS_RETURN_IF_ERROR(service.CheckModelName(model_name));
  bool stream = false;
  RS_RETURN_IF_ERROR(ReadField(body, "stream", stream));
  if (stream) return Unimplemented("streaming is not implemented yet");
  Common c;
  RS_RETURN_IF_ERROR(ReadField(body, "n", c.n));
  if (c.n < 1 || c.n > ModelService::kMaxChoices) {
    return InvalidArgument("'n' must be between 1 and " + std::to_string(ModelService::kMaxChoices));
  }
  GenerateOptions& o = c.options;
  o.sampling.temperature = 1.0;  // OpenAI's default
  RS_RETURN_IF_ERROR(ReadField(body, "max_tokens", o.max_tokens));
  if (chat && body.contains("max_completion_tokens")) {
    RS_RETURN_IF_ERROR(ReadField(body, "max_completion_tokens", o.max_tokens));
  }
  RS_RETURN_IF_ERROR(ReadField(body, "temperature", o.sampling.temperature));
  RS_RETURN_IF_ERROR(ReadField(body, "top_p", o.sampling.top_p));
  RS_RETURN_IF_ERROR(ReadField(body, "top_k", o.sampling.top_k));
  RS_RETURN_IF_ERROR(ReadField(body, "min_p", o.sampling.min_p));
  RS_RETURN_IF_ERROR(ReadField(body, "ignore_eos", o.ignore_eos));
  RS_RETURN_IF_ERROR(ReadField(body, "min_tokens", o.min_tokens));
  RS_RETURN_IF_ERROR(ReadField(body, "repetition_penalty", o.sampling.repetition_penalty));
  RS_RETURN_IF_ERROR(ReadField(body, "frequency_penalty", o.sampling.frequency_penalty));
  RS_RETURN_IF_ERROR(ReadField(body, "presence_penalty", o.sampling.presence_penalty));
  std::int64_t seed = -1;
  RS_RETURN_IF_ERROR(ReadField(body, "seed", seed));
  if (body.contains("seed") && !body["seed"].is_null()) o.sampling.seed = static_cast<std::uint64_t>(seed);
  if (auto st = body.find("stop"); st != body.end() && !st->is_null()) {
    if (st->is_string()) {
      o.stop.push_back(st->get<std::string>());
    } else if (st->is_array() && st->size() <= 16) {
      for (const auto& v : *st) {
        if (!v.is_string()) return InvalidArgument("'stop' must be a string or a list of strings");
        o.stop.push_back(v.get<std::string>());
      }
    } else {
      return InvalidArgument("'stop' must be a string or a list of at most 16 strings");
    }
  }
  if (auto st = body.find("stop_token_ids"); st != body.end() && !st->is_null()) {
    if (!st->is_array()) return InvalidArgument("'stop_token_ids' must be a list of token ids");
    for (const auto& v : *st) {
      if (!v.is_number_integer()) return InvalidArgument("'stop_token_ids' must be a list of token ids");
      o.stop_token_ids.push_back(v.get<std::int64_t>());
    }
  }
  if (chat) {
    // Chat: logprobs is a boolean and top_logprobs the count (OpenAI).
    bool want = false;
    RS_RETURN_IF_ERROR(ReadField(body, "logprobs", want));
    std::int64_t top = 0;
    RS_RETURN_IF_ERROR(ReadField(body, "top_logprobs", top));
    if (top < 0 || top > 20) return InvalidArgument("'top_logprobs' must be between 0 and 20");
    if (top > 0 && !want) return InvalidArgument("'top_logprobs' needs 'logprobs': true");
    c.logprobs = want ? top : -1;
  } else {
    RS_RETURN_IF_ERROR(ReadField(body, "logprobs", c.logprobs));
    if (c.logprobs > 20 || (body.contains("logprobs") && !body["logprobs"].is_null() && c.logprobs < 0))
      return InvalidArgument("'logprobs' must be between 0 and 20");
  }
  o.top_logprobs = c.logprobs > 0 ? static_cast<std::size_t>(c.logprobs) : 0;
  return c;
}

// A token as text for logprobs: its decoded string with a tokenizer, else
// "token_id:N" (vLLM's return_tokens_as_token_ids format).
std::string TokenText(const ModelService& service, std::int64_t id) {
  if (const tok::Tokenizer* t = service.tokenizer()) {
    auto s = t->Decode({static_cast<uint32_t>(id)}, false);
    if (s.ok()) return *s;
  }
  return "token_id:" + std::to_string(id);
}

json Usage(std::size_t prompt, std::size_t completion) {
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

std::int64_t Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The OpenAI response envelope shared by completions and chat.
json Envelope(ModelService& service, const char* id_prefix, const char* object, json choices, std::size_t prompt,
              std::size_t completion) {
  return json{{"id", service.NextRequestId(id_prefix)},
              {"object", object},
              {"created", Now()},
              {"model", service.name()},
              {"choices", std::move(choices)},
              {"usage", Usage(prompt, completion)}};
}

StatusOr<json> ParseBody(const std::string& text) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return InvalidArgument("request body is not valid JSON");
  if (!body.is_object()) return InvalidArgument("request body must be a JSON object");
  return body;
}

StatusOr<json> Complete(ModelService& service, const std::string& text) {
  RS_ASSIGN_OR_RETURN(json body, ParseBody(text));
  RS_ASSIGN_OR_RETURN(Common c, ReadCommon(service, body, /*chat=*/false));
  RS_ASSIGN_OR_RETURN(auto ids, ReadPrompt(service, body));
  RS_ASSIGN_OR_RETURN(auto results, service.GenerateN(ids, c.options, static_cast<int>(c.n)));
  json choices = json::array();
  std::size_t completion_tokens = 0;
  for (std::size_t k = 0; k < results.size(); ++k) {
    const GenerateResult& result = results[k];
    completion_tokens += result.generated_ids.size();
    json choice = {{"index", k}, {"text", result.text}, {"token_ids", result.generated_ids},
                   {"finish_reason", result.finish_reason}, {"logprobs", nullptr}};
    if (c.logprobs >= 0) {
      json tokens = json::array(), token_logprobs = json::array(), top = json::array();
      for (std::size_t i = 0; i < result.generated_ids.size(); ++i) {
        tokens.push_back(TokenText(service, result.generated_ids[i]));
        token_logprobs.push_back(result.logprobs[i]);
        json step = json::object();
        if (i < result.top_logprobs.size())
          for (const auto& t : result.top_logprobs[i]) {
            // Two tokens can decode to the same text (e.g. partial UTF-8
            // bytes); keep both by naming the later one by its id.
            std::string key = TokenText(service, t.id);
            if (step.contains(key)) key = "token_id:" + std::to_string(t.id);
            step[key] = t.logprob;
          }
        top.push_back(step);
      }
      choice["logprobs"] = {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}};
    }
    choices.push_back(std::move(choice));
  }
  return Envelope(service, "cmpl", "text_completion", std::move(choices), ids.size(), completion_tokens);
}

// POST /v1/chat/completions: the messages are rendered with the model's
// chat template (add_generation_prompt=true), tokenized without adding
// special tokens (the template writes them), and generated like a
// completion.
StatusOr<json> ChatComplete(ModelService& service, const std::string& text) {
  RS_ASSIGN_OR_RETURN(json body, ParseBody(text));
  RS_ASSIGN_OR_RETURN(Common c, ReadCommon(service, body, /*chat=*/true));
  auto mit = body.find("messages");
  if (mit == body.end() || !mit->is_array() || mit->empty()) {
    return InvalidArgument("'messages' must be a non-empty list of {\"role\", \"content\"} objects");
  }
  // Keep the caller's key order (tools rendered with tojson must not be
  // re-sorted): re-parse the body as ordered JSON.
  auto ordered = nlohmann::ordered_json::parse(text, nullptr, false);
  // OpenAI content parts ([{"type":"text","text":...}, ...]) become one
  // string (joined with newlines, as vLLM does for string templates).
  for (auto& m : ordered["messages"]) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    std::string joined;
    for (const auto& part : m["content"]) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
        return InvalidArgument("only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
      }
      if (!joined.empty()) joined += "\n";
      joined += part["text"].get<std::string>();
    }
    m["content"] = joined;
  }
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  for (const char* key : {"tools", "documents"}) {
    if (ordered.contains(key) && !ordered[key].is_null()) extra[key] = ordered[key];
  }
  if (ordered.contains("chat_template_kwargs") && ordered["chat_template_kwargs"].is_object()) {
    for (auto it = ordered["chat_template_kwargs"].begin(); it != ordered["chat_template_kwargs"].end(); ++it) {
      extra[it.key()] = it.value();
    }
  }
  bool add_generation_prompt = true;
  RS_RETURN_IF_ERROR(ReadField(body, "add_generation_prompt", add_generation_prompt));
  RS_ASSIGN_OR_RETURN(std::string prompt, service.ApplyChatTemplate(ordered["messages"], add_generation_prompt, extra));
  RS_ASSIGN_OR_RETURN(auto ids, service.Tokenize(prompt, /*add_special_tokens=*/false));
  if (ids.empty()) return InvalidArgument("the chat template rendered an empty prompt");
  RS_ASSIGN_OR_RETURN(auto results, service.GenerateN(ids, c.options, static_cast<int>(c.n)));
  json choices = json::array();
  std::size_t completion_tokens = 0;
  for (std::size_t k = 0; k < results.size(); ++k) {
    const GenerateResult& result = results[k];
    completion_tokens += result.generated_ids.size();
    json choice = {{"index", k},
                   {"message", {{"role", "assistant"}, {"content", result.text}}},
                   {"token_ids", result.generated_ids},
                   {"finish_reason", result.finish_reason},
                   {"logprobs", nullptr}};
    if (c.logprobs >= 0) {
      json content = json::array();
      for (std::size_t i = 0; i < result.generated_ids.size(); ++i) {
        json top = json::array();
        if (i < result.top_logprobs.size())
          for (const auto& t : result.top_logprobs[i]) top.push_back({{"token", TokenText(service, t.id)}, {"logprob", t.logprob}});
        content.push_back({{"token", TokenText(service, result.generated_ids[i])},
                           {"logprob", result.logprobs[i]},
                           {"top_logprobs", top}});
      }
      choice["logprobs"] = {{"content", content}};
    }
    choices.push_back(std::move(choice));
  }
  return Envelope(service, "chatcmpl", "chat.completion", std::move(choices), ids.size(), completion_tokens);
}

std::pair<int, std::string> Respond(const StatusOr<json>& r) {
  if (!r.ok()) return {HttpStatusFor(r.status().code()), ErrorJson(r.status())};
  return {200, r->dump(-1, ' ', false, json::error_handler_t::replace)};
}

}  // namespace

std::pair<int, std::string> HandleCompletion(ModelService& service, const std::string& body) {
  return Respond(Complete(service, body));
}

std::pair<int, std::string> HandleChatCompletion(ModelService& service, const std::string& body) {
  return Respond(ChatComplete(service, body));
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
  s.Post("/v1/chat/completions", [impl](const httplib::Request& req, httplib::Response& res) {
    auto [code, body] = HandleChatCompletion(impl->service, req.body);
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
