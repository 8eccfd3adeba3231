#include "server/api/grpc_service.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "proto/ropeserve/v1/ropeserve.grpc.pb.h"
#include "server/api/error_mapping.h"
#include "server/api/model_service.h"

namespace ropeserve::api {

namespace v1 = ::ropeserve::v1;

namespace {

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(GrpcCodeFor(s.code())), s.message());
}

Status Serve(ModelService& service, const v1::GenerateRequest& req, v1::GenerateResponse* resp) {
  RS_RETURN_IF_ERROR(service.CheckModelName(req.model()));
  GenerateOptions o;
  o.max_tokens = req.max_tokens() == 0 ? 16 : req.max_tokens();
  const auto& s = req.sampling();
  o.sampling.temperature = s.temperature();
  o.sampling.top_p = s.top_p() == 0 ? 1.0 : s.top_p();
  o.sampling.top_k = s.top_k();
  o.sampling.min_p = s.min_p();
  if (s.has_seed()) o.sampling.seed = s.seed();
  if (s.has_repetition_penalty()) o.sampling.repetition_penalty = s.repetition_penalty();
  o.sampling.frequency_penalty = s.frequency_penalty();
  o.sampling.presence_penalty = s.presence_penalty();
  o.min_tokens = req.min_tokens();
  o.top_logprobs = req.top_logprobs();
  o.ignore_eos = req.ignore_eos();
  for (const auto& st : req.stop()) o.stop.push_back(st);
  o.stop_token_ids.assign(req.stop_token_ids().begin(), req.stop_token_ids().end());
  std::vector<std::int64_t> ids(req.prompt_ids().begin(), req.prompt_ids().end());
  if (!req.prompt().empty()) {
    if (!ids.empty()) return InvalidArgument("give either prompt_ids or prompt, not both");
    RS_ASSIGN_OR_RETURN(ids, service.Tokenize(req.prompt(), /*add_special_tokens=*/true));
  }
  if (ids.empty()) return InvalidArgument("prompt_ids (or prompt) is required");
  RS_ASSIGN_OR_RETURN(GenerateResult r, service.Generate(ids, o));

  resp->set_id(service.NextRequestId("gen"));
  resp->set_model(service.name());
  for (std::size_t i = 0; i < r.generated_ids.size(); ++i) {
    resp->add_token_ids(r.generated_ids[i]);
    resp->add_logprobs(r.logprobs[i]);
  }
  for (const auto& step : r.top_logprobs) {
    auto* out = resp->add_top_logprobs();
    for (const auto& t : step) {
      auto* e = out->add_tokens();
      e->set_id(t.id);
      e->set_logprob(t.logprob);
    }
  }
  resp->set_finish_reason(r.finish_reason);
  resp->set_text(r.text);
  resp->mutable_usage()->set_prompt_tokens(static_cast<std::int64_t>(ids.size()));
  resp->mutable_usage()->set_completion_tokens(static_cast<std::int64_t>(r.generated_ids.size()));
  return Status::Ok();
}

class Service final : public v1::Ropeserve::CallbackService {
 public:
  explicit Service(ModelService& service) : service_(service) {}

  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* ctx, const v1::HealthRequest*,
                                   v1::HealthResponse* resp) override {
    resp->set_status("ok");
    return Finish(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx, const v1::ListModelsRequest*,
                                       v1::ListModelsResponse* resp) override {
    auto* m = resp->add_models();
    m->set_id(service_.name());
    m->set_architecture(service_.config().architecture);
    m->set_max_model_len(service_.config().max_position_embeddings);
    m->set_vocab_size(service_.config().vocab_size);
    return Finish(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* ctx, const v1::GenerateRequest* req,
                                     v1::GenerateResponse* resp) override {
    return Finish(ctx, ToGrpc(Serve(service_, *req, resp)));
  }

 private:
  static grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }
  ModelService& service_;
};

}  // namespace

struct GrpcServer::Impl {
  explicit Impl(ModelService& s) : service(s) {}
  Service service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

GrpcServer::GrpcServer(ModelService& service) : impl_(std::make_unique<Impl>(service)) {}

GrpcServer::~GrpcServer() { Stop(); }

Status GrpcServer::Start(const std::string& host, int port) {
  grpc::ServerBuilder builder;
  const std::string address = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                              std::to_string(port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl_->port);
  builder.RegisterService(&impl_->service);
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || impl_->port == 0)
    return FailedPrecondition("cannot listen for gRPC on " + address + " (port in use?)");
  spdlog::info("gRPC listening on {}:{}", host, impl_->port);
  return Status::Ok();
}

void GrpcServer::Stop() {
  if (impl_->server) {
    impl_->server->Shutdown();
    impl_->server.reset();
  }
}

int GrpcServer::port() const { return impl_->port; }

}  // namespace ropeserve::api
