// The API's routes (HttpServer::Impl::InstallApi): every endpoint the
// HTTP server serves besides health, readiness and metrics, installed on
// the cpp-httplib server by http_server.cc.
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/cpu/kernel_config.h"
#include "kernels/cpu/kernel_table.h"
#include "server/api/http/http_connection.h"
#include "server/api/http/http_server_impl.h"
#include "server/api/http/openapi.h"
#include "server/service/generation_service.h"

namespace ropeserve::api {

using json = nlohmann::json;
using http_detail::CurrentRequest;
using http_detail::Endpoint;
using http_detail::ReadBody;
using http_detail::SetError;

namespace {

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

// GET /v1/models: every served model, the decoder, the QA model and the
// encoders (`task` and `max_model_len` are extensions, as vLLM's).
StatusOr<json> ModelList(ServingContext& ctx) {
  RS_RETURN_IF_ERROR(ctx.Loaded());
  auto card = [](const std::string& id, const char* task, std::int64_t max_len, const std::string& arch) {
    return json{{"id", id},     {"object", "model"},        {"created", 0},        {"owned_by", "ropeserve"},
                {"task", task}, {"max_model_len", max_len}, {"architecture", arch}};
  };
  json data = json::array();
  if (service::GenerationService* service = ctx.service.load())
    data.push_back(card(service->name(), "generate", service->max_model_len(), service->config().architecture));
  if (service::QaService* qa = ctx.qa.load())
    data.push_back(
        card(qa->name(), "question-answering", qa->config().max_position_embeddings, qa->config().architecture));
  if (const auto* embedders = ctx.encoders.load())
    for (service::EncoderService* e : *embedders) {
      json c = card(e->name(), e->task(), e->max_input_tokens(), e->config().architecture);
      c.update(EncoderFields(*e));
      data.push_back(std::move(c));
    }
  return json{{"object", "list"}, {"data", std::move(data)}};
}

// /v1/info's fields of the generation model (null without one).
json GenerationInfo(const service::GenerationService* service) {
  if (service == nullptr)
    return {{"model", nullptr},    {"architecture", nullptr}, {"dtype", nullptr},      {"quantization", nullptr},
            {"device", nullptr},   {"tokenizer", nullptr},    {"vocab_size", nullptr}, {"max_model_len", nullptr},
            {"kv_cache", nullptr}, {"kv_offload", nullptr}};
  return {{"model", service->name()},
          {"architecture", service->config().architecture},
          {"dtype", service->dtype()},
          {"quantization", service->quantization()},
          {"device", service->device()},
          {"tokenizer", service->tokenizer() != nullptr},
          {"vocab_size", service->config().vocab_size},
          {"max_model_len", service->max_model_len()},
          {"kv_cache",
           {{"block_size", service->engine_config().block_size},
            {"num_blocks", service->kv_cache().num_blocks},
            {"tokens", service->kv_cache().tokens},
            {"bytes", service->kv_cache().bytes}}},
          {"kv_offload",
           {{"num_blocks", service->kv_offload().num_blocks},
            {"tokens", service->kv_offload().tokens},
            {"bytes", service->kv_offload().bytes}}}};
}

// GET /v1/info: the models, their memory, the server's limits and the CPU
// kernels' configuration.
StatusOr<json> ServerInfo(ServingContext& ctx, const HttpServerOptions& options) {
  RS_RETURN_IF_ERROR(ctx.Loaded());
  const service::GenerationService* service = ctx.service.load();
  json info = GenerationInfo(service);
  json limits = {{"max_body_bytes", options.max_body_bytes},
                 {"max_connections", options.limits.max_connections},
                 {"request_timeout_seconds", ctx.request_timeout_seconds}};
  if (service != nullptr) {  // the engine's
    const EngineConfig& o = service->engine_config();
    limits.update({{"max_num_seqs", o.scheduler.max_num_seqs},
                   {"max_num_batched_tokens", o.scheduler.max_num_batched_tokens},
                   {"max_queue_requests", o.scheduler.max_waiting_requests},
                   {"max_queue_tokens", o.scheduler.max_waiting_tokens},
                   {"max_request_tokens", service->limits().max_request_tokens},
                   {"max_document_bytes", service->limits().max_document_bytes}});
  }
  info["limits"] = std::move(limits);
  info["qa"] = nullptr;
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
  return info;
}

}  // namespace

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
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    auto list = ModelList(ctx);
    if (!list.ok()) return SetError(res, list.status());
    res.set_content(list->dump(), "application/json");
  });
  s.Get("/v1/info", [this](const httplib::Request&, httplib::Response& res) {
    auto info = ServerInfo(ctx, options);
    if (!info.ok()) return SetError(res, info.status());
    res.set_content(info->dump(), "application/json");
  });
  // The handler of a request without a body (GET, DELETE, and the POSTs
  // that take none).
  auto bodiless = [this](Endpoint endpoint) {
    return [this, endpoint](const httplib::Request& req, httplib::Response& res) { Work(endpoint, req, res); };
  };
  auto post = [this](const char* path, Endpoint endpoint) { PostWork(path, endpoint); };
  post("/v1/completions", &Completions);
  post("/v1/chat/completions", &ChatCompletions);
  post("/v1/messages", &Messages);
  post("/v1/messages/count_tokens", &CountMessageTokens);
  post("/v1/responses", &CreateResponse);
  // Cancel takes no body (the SDK may send none at all).
  server->Post(R"(/v1/responses/([A-Za-z0-9_-]+)/cancel)", bodiless(&CancelResponse));
  server->Post("/v1/files", [this](const httplib::Request& req, httplib::Response& res,
                                   const httplib::ContentReader& reader) { Upload(req, res, reader); });
  server->Get("/v1/files", bodiless(&ListFiles));
  server->Get(R"(/v1/files/([A-Za-z0-9_-]+)/content)", bodiless(&FileContent));
  server->Get(R"(/v1/files/([A-Za-z0-9_-]+))", bodiless(&RetrieveFile));
  server->Delete(R"(/v1/files/([A-Za-z0-9_-]+))", bodiless(&DeleteFile));
  post("/v1/batches", &CreateBatch);
  server->Get("/v1/batches", bodiless(&ListBatches));
  // Cancel takes no body (the SDK sends none).
  server->Post(R"(/v1/batches/([A-Za-z0-9_-]+)/cancel)", bodiless(&CancelBatch));
  server->Get(R"(/v1/batches/([A-Za-z0-9_-]+))", bodiless(&RetrieveBatch));
  server->Get(R"(/v1/responses/([A-Za-z0-9_-]+)/input_items)", bodiless(&ListInputItems));
  server->Get(R"(/v1/responses/([A-Za-z0-9_-]+))", bodiless(&RetrieveResponse));
  server->Delete(R"(/v1/responses/([A-Za-z0-9_-]+))", bodiless(&DeleteResponse));
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
    auto reply = AnswerQuestions(*qa,
                                 RestRequest{*body, ctx.request_timeout_seconds, &connection::ClientGone, nullptr,
                                             CurrentRequest().span.context},
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
                                                 CurrentRequest().span.context});
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

}  // namespace ropeserve::api
