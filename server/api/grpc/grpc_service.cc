#include "server/api/grpc/grpc_service.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "proto/ropeserve/v1/ropeserve.grpc.pb.h"
#include "server/api/error_mapping.h"
#include "server/api/grpc/grpc_calls.h"
#include "server/api/grpc/grpc_encoders.h"
#include "server/api/grpc/grpc_request.h"
#include "server/api/observability/logging.h"
#include "server/api/rest/rest_handlers.h"
#include "server/api/serving_context.h"
#include "server/api/work_pool.h"
#include "server/service/document_summary.h"
#include "server/service/generation_service.h"
#include "server/service/input_processor.h"
#include "server/service/qa_service.h"

namespace ropeserve::api {

namespace v1 = ::ropeserve::v1;

// The gRPC status of an error, with google.rpc details in the
// grpc-status-details-bin trailer (AIP-193): ErrorInfo with the REST
// error's `code` as its reason, BadRequest naming the field (`param`) of an
// invalid request, RetryInfo (1 s, as REST's Retry-After) when overloaded.
grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  const int code = GrpcCodeFor(s.code());
  google::rpc::Status details;
  details.set_code(code);
  details.set_message(s.message());
  if (const std::string reason = ErrorReason(s); !reason.empty()) {
    google::rpc::ErrorInfo info;
    info.set_reason(reason);
    info.set_domain("ropeserve.ai");
    details.add_details()->PackFrom(info);
  }
  if (!s.param().empty()) {
    google::rpc::BadRequest bad;
    auto* v = bad.add_field_violations();
    v->set_field(s.param());
    v->set_description(s.message());
    details.add_details()->PackFrom(bad);
  }
  if (s.code() == ErrorCode::kResourceExhausted || s.code() == ErrorCode::kUnavailable) {
    google::rpc::RetryInfo retry;
    retry.mutable_retry_delay()->set_seconds(1);
    details.add_details()->PackFrom(retry);
  }
  return grpc::Status(static_cast<grpc::StatusCode>(code), s.message(), details.SerializeAsString());
}

namespace {

const char* GrpcCodeName(grpc::StatusCode code) {
  static const char* kNames[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "UNKNOWN";
}

std::string Metadata(const grpc::CallbackServerContext* ctx, const char* key) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

}  // namespace

Status Begin(ServingContext& ctx, grpc::CallbackServerContext* call, const char* method, CallStart& out,
             bool generation) {
  out.method = method;
  out.peer = call->peer();
  out.request_id = RequestIdOrNew(Metadata(call, "x-request-id"));
  call->AddInitialMetadata("x-request-id", out.request_id);
  out.span = OpenServerSpan(ctx.tracer, Metadata(call, "traceparent"));
  call->AddInitialMetadata("traceresponse", out.span.TraceResponse());
  RS_RETURN_IF_ERROR(ctx.api_keys.Check(Metadata(call, "authorization")));
  RS_ASSIGN_OR_RETURN(out.ticket, ctx.lifecycle.Admit());
  if (generation) {
    RS_ASSIGN_OR_RETURN(out.service, ctx.LoadedService());
  } else {
    RS_RETURN_IF_ERROR(ctx.Loaded());
    out.service = ctx.service.load();
  }
  // The client's deadline flows into the scheduler; --request-timeout caps it.
  out.timeout_seconds = ctx.request_timeout_seconds;
  const auto deadline = call->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    const double left = std::chrono::duration<double>(deadline - std::chrono::system_clock::now()).count();
    if (left <= 0) return Status(ErrorCode::kDeadlineExceeded, "the deadline passed before the call started");
    if (out.timeout_seconds == 0 || left < out.timeout_seconds) out.timeout_seconds = left;
  }
  return Status::Ok();
}

void Account(ServingContext& ctx, const CallStart& c, const grpc::Status& status) {
  const char* code = GrpcCodeName(status.error_code());
  if (status.error_code() == grpc::StatusCode::INTERNAL || status.error_code() == grpc::StatusCode::DATA_LOSS)
    spdlog::error("grpc call {} failed: {}", c.request_id, status.error_message());
  if (ctx.metrics != nullptr) ctx.metrics->CountRequest(c.method, "grpc", code);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c.start).count();
  LogAccess("grpc call", {{"method", c.method},
                          {"code", code},
                          {"duration_ms", std::round(ms * 100) / 100},
                          {"request_id", c.request_id},
                          {"trace_id", c.span.context.TraceIdHex()},
                          {"span_id", c.span.context.SpanIdHex()},
                          {"remote", c.peer}});
  if (ctx.tracer != nullptr)
    ctx.tracer->EndServerSpan(c.span, "grpc " + c.method,
                              {{"rpc.system", std::string("grpc")},
                               {"rpc.service", std::string("ropeserve.v1.Inference")},
                               {"rpc.method", c.method},
                               {"rpc.grpc.status_code", static_cast<std::int64_t>(status.error_code())},
                               {"ropeserve.request_id", c.request_id}},
                              status.error_code() == grpc::StatusCode::INTERNAL ||
                                  status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                  status.error_code() == grpc::StatusCode::DATA_LOSS,
                              status.error_message().substr(0, 200));
}

namespace {

void FillUsage(v1::Usage* u, std::int64_t prompt, std::int64_t completion, std::int64_t cached) {
  u->set_prompt_tokens(prompt);
  u->set_completion_tokens(completion);
  u->set_cached_tokens(cached);
}

// How a summary was made (set on the pool before its first output).
struct SummaryShape {
  std::string strategy;
  std::int64_t chunks = 1;
};

// Summarize / SummarizeStream, on the work pool: validation, the plan
// (long documents are split here), the first requests.
StatusOr<std::unique_ptr<service::OutputSource>> StartSummary(service::GenerationService& service, double timeout,
                                                              const TraceContext& trace,
                                                              const v1::SummarizeRequest& req, SummaryShape& shape) {
  RS_ASSIGN_OR_RETURN(GrpcSummarize r, ReadSummarize(req));
  RS_RETURN_IF_ERROR(service.CheckModelName(r.model));
  service::DocumentSummarizer summarizer(service);
  RS_ASSIGN_OR_RETURN(service::SummaryPlan plan, summarizer.Plan(r.summary, r.fields));
  shape.strategy = service::StrategyName(plan);
  shape.chunks = static_cast<std::int64_t>(plan.chunks.size());
  return summarizer.Start(plan, r.fields, timeout, service::GenerationService::Admission::kDontWait, trace);
}

StatusOr<std::unique_ptr<service::OutputSource>> StartGenerate(service::GenerationService& service, double timeout,
                                                               const TraceContext& trace,
                                                               const v1::GenerateRequest& req) {
  RS_ASSIGN_OR_RETURN(GrpcGenerate r, ReadGenerate(req));
  service::GenerationRequest input;
  input.model = std::move(r.model);
  input.prompts.push_back(service::Prompt{std::move(r.prompt), std::move(r.prompt_ids)});
  input.fields = std::move(r.fields);
  input.endpoint = service::Endpoint::kGenerate;
  input.timeout_seconds = timeout;
  input.trace = trace;
  input.prompt_param = "prompt_ids";
  RS_ASSIGN_OR_RETURN(service::PreparedGeneration v, service::PrepareGeneration(service, input));
  RS_ASSIGN_OR_RETURN(auto gen,
                      service.Start(v.prompts[0], v.generation, service::GenerationService::Admission::kDontWait));
  return std::unique_ptr<service::OutputSource>(std::move(gen));
}

// Finishes a call that needs no generation (or failed before starting one).
template <typename Reactor>
Reactor* Reject(ServingContext& ctx, const CallStart& c, const Status& s, Reactor* reactor) {
  Account(ctx, c, ToGrpc(s));
  reactor->Finish(ToGrpc(s));
  return reactor;
}

// A write reactor that only reports an error (streams failing up front).
template <typename Msg>
class FailedStream final : public grpc::ServerWriteReactor<Msg> {
 public:
  explicit FailedStream(const grpc::Status& s) { this->Finish(s); }
  void OnDone() override { delete this; }
};

const Status kPoolFull(ErrorCode::kResourceExhausted, "too many gRPC requests are being prepared; retry later");

}  // namespace

namespace {

class Service final : public v1::Inference::CallbackService {
 public:
  Service(ServingContext& ctx, WorkPool& pool) : ctx_(ctx), pool_(pool) {}

  grpc::ServerUnaryReactor* Summarize(grpc::CallbackServerContext* call, const v1::SummarizeRequest* req,
                                      v1::SummarizeResponse* resp) override {
    CallStart c;
    if (Status b = Begin(ctx_, call, "Summarize", c); !b.ok()) return Reject(ctx_, c, b, call->DefaultReactor());
    const std::string id = c.service->NextRequestId("sum"), model = c.service->name();
    auto shape = std::make_shared<SummaryShape>();
    auto* reactor = new UnaryCall(
        ctx_, std::move(c),
        [resp, id, model, shape](const service::OutputDelta& last, std::int64_t, const Accumulated& acc) {
          resp->set_id(id);
          resp->set_model(model);
          resp->set_summary(acc.text);
          resp->set_finish_reason(last.finish_reason);
          resp->set_strategy(shape->strategy);
          resp->set_chunks(shape->chunks);
          FillUsage(resp->mutable_usage(), last.prompt_tokens, last.completion_tokens, last.cached_tokens);
        });
    Prepare(reactor, [req, shape](service::GenerationService& service, double timeout, const TraceContext& trace) {
      return StartSummary(service, timeout, trace, *req, *shape);
    });
    return reactor;
  }

  grpc::ServerWriteReactor<v1::SummarizeChunk>* SummarizeStream(grpc::CallbackServerContext* call,
                                                                const v1::SummarizeRequest* req) override {
    CallStart c;
    if (Status b = Begin(ctx_, call, "SummarizeStream", c); !b.ok()) {
      Account(ctx_, c, ToGrpc(b));
      return new FailedStream<v1::SummarizeChunk>(ToGrpc(b));
    }
    const std::string id = c.service->NextRequestId("sum");
    auto* reactor = new StreamCall<v1::SummarizeChunk>(
        ctx_, std::move(c), [id](const service::OutputDelta& d, std::int64_t, Accumulated&, v1::SummarizeChunk& m) {
          m.set_id(id);
          if (d.progress) {
            auto* p = m.mutable_progress();
            p->set_phase(d.progress->phase);
            p->set_chunks_done(d.progress->done);
            p->set_chunks_total(d.progress->total);
            return;
          }
          m.set_delta(d.text);
          if (d.finished) {
            m.set_finish_reason(d.finish_reason);
            FillUsage(m.mutable_usage(), d.prompt_tokens, d.completion_tokens, d.cached_tokens);
          }
        });
    auto shape = std::make_shared<SummaryShape>();
    Prepare(reactor, [req, shape](service::GenerationService& service, double timeout, const TraceContext& trace) {
      return StartSummary(service, timeout, trace, *req, *shape);
    });
    return reactor;
  }

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* call,
                                                           const v1::GenerateRequest* req) override {
    CallStart c;
    if (Status b = Begin(ctx_, call, "Generate", c); !b.ok()) {
      Account(ctx_, c, ToGrpc(b));
      return new FailedStream<v1::GenerateResponse>(ToGrpc(b));
    }
    const std::string id = c.service->NextRequestId("gen"), model = c.service->name();
    auto* reactor = new StreamCall<v1::GenerateResponse>(
        ctx_, std::move(c),
        [id, model](const service::OutputDelta& d, std::int64_t prompt, Accumulated& acc, v1::GenerateResponse& m) {
          acc.completion += static_cast<std::int64_t>(d.ids.size());
          m.set_id(id);
          m.set_model(model);
          for (std::size_t i = 0; i < d.ids.size(); ++i) {
            m.add_token_ids(d.ids[i]);
            m.add_logprobs(d.logprobs[i]);
          }
          for (const auto& step : d.top_logprobs) {
            auto* out = m.add_top_logprobs();
            for (const auto& t : step) {
              auto* e = out->add_tokens();
              e->set_id(t.id);
              e->set_logprob(t.logprob);
            }
          }
          m.set_text(d.text);
          if (d.finished) {
            m.set_finish_reason(d.finish_reason);
            FillUsage(m.mutable_usage(), prompt, acc.completion, d.cached_tokens);
          }
        });
    Prepare(reactor, [req](service::GenerationService& service, double timeout, const TraceContext& trace) {
      return StartGenerate(service, timeout, trace, *req);
    });
    return reactor;
  }

  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* call, const v1::AnswerRequest* req,
                                   v1::AnswerResponse* resp) override {
    CallStart c;
    if (Status b = Begin(ctx_, call, "Answer", c, false); !b.ok()) return Reject(ctx_, c, b, call->DefaultReactor());
    service::QaService* qa = ctx_.qa.load();
    if (qa == nullptr)
      return Reject(ctx_, c, Unimplemented("no QA model is loaded (serve --qa DIR)"), call->DefaultReactor());
    const double timeout = c.timeout_seconds;
    auto* reactor = new DeferredUnaryCall(ctx_, std::move(c));
    auto link = reactor->link();
    // Windows are built on the pool; the engine's steps run them; the
    // answers are selected on the pool and finish the call. No thread
    // waits for the engine.
    const bool queued = pool_.TrySubmit([qa, req, resp, link, timeout] {
      auto fail = [&](const Status& s) { DeferredUnaryCall::Complete(link, s, nullptr); };
      auto r = ReadAnswer(*req);
      if (!r.ok()) return fail(r.status());
      if (!r->model.empty() && r->model != qa->name())
        return fail(NotFound("model '" + r->model + "' does not exist (QA model: '" + qa->name() + "')"));
      auto v = service::ValidateQa(r->fields, qa->config().max_position_embeddings);
      if (!v.ok()) return fail(v.status());
      service::QaRequest q;
      q.question = std::move(r->question);
      q.context = std::move(r->context);
      for (const auto& p : r->passages) q.passages.push_back(p.text);
      q.windows = v->windows;
      q.options = v->options;
      q.offset_unit = v->offset_unit;
      // The passages' ids, for the answers.
      auto passages = std::make_shared<std::vector<service::QaPassage>>(std::move(r->passages));
      auto call = qa->AnswerBatchAsync(
          {std::move(q)}, timeout, [qa, resp, link, passages](StatusOr<std::vector<service::QaResult>> out) {
            DeferredUnaryCall::Complete(link, out.status(), [&] {
              resp->set_id(qa->NextRequestId());
              resp->set_model(qa->name());
              for (const auto& a : (*out)[0].answers) {
                auto* x = resp->add_answers();
                x->set_text(a.text);
                x->set_score(a.score);
                x->set_start(a.start);
                x->set_end(a.end);
                const bool multi = !passages->empty();
                x->set_passage(multi ? static_cast<std::int32_t>(a.passage) : 0);
                if (multi && a.passage >= 0 && (*passages)[static_cast<std::size_t>(a.passage)].id)
                  x->set_passage_id(*(*passages)[static_cast<std::size_t>(a.passage)].id);
              }
              if ((*out)[0].null_score) resp->set_null_score(*(*out)[0].null_score);
              resp->mutable_usage()->set_prompt_tokens((*out)[0].tokens);
            });
          });
      if (!call.ok()) return fail(call.status());
      std::lock_guard<std::mutex> lock(link->mu);
      // The client left while we prepared: drop the work.
      if (link->target == nullptr || !link->target->SetOnCancelLocked([c = *call] { c->Cancel(); })) (*call)->Cancel();
    });
    if (!queued) DeferredUnaryCall::Complete(link, kPoolFull, nullptr);
    return reactor;
  }

  // An encoder RPC: the encoder `req->model()` names for `task`, then, on
  // the pool, `start(encoder, req, resp, link, timeout)` reads the request
  // and starts the async call (the engine's steps run its inputs; its
  // completion fills `resp` and finishes the call).
  template <class Req, class Resp, class Start>
  grpc::ServerUnaryReactor* EncoderRpc(grpc::CallbackServerContext* call, const char* method, const Req* req,
                                       Resp* resp, EncoderTask task, Start start) {
    CallStart c;
    if (Status b = Begin(ctx_, call, method, c, false); !b.ok()) return Reject(ctx_, c, b, call->DefaultReactor());
    const std::vector<service::EncoderService*>* encoders = ctx_.encoders.load();
    auto found =
        FindEncoder(encoders == nullptr ? std::vector<service::EncoderService*>() : *encoders, req->model(), task);
    if (!found.ok()) return Reject(ctx_, c, found.status(), call->DefaultReactor());
    service::EncoderService* encoder = *found;
    const double timeout = c.timeout_seconds;
    auto* reactor = new DeferredUnaryCall(ctx_, std::move(c));
    auto link = reactor->link();
    const bool queued = pool_.TrySubmit([encoder, req, resp, link, timeout, start] {
      StatusOr<std::shared_ptr<service::EncoderCall>> call = start(*encoder, *req, resp, link, timeout);
      if (!call.ok()) return DeferredUnaryCall::Complete(link, call.status(), nullptr);
      std::lock_guard<std::mutex> lock(link->mu);
      // The client left while we prepared: drop the work.
      if (link->target == nullptr || !link->target->SetOnCancelLocked([c = *call] { c->Cancel(); })) (*call)->Cancel();
    });
    if (!queued) DeferredUnaryCall::Complete(link, kPoolFull, nullptr);
    return reactor;
  }

  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* call, const v1::EmbedRequest* req,
                                  v1::EmbedResponse* resp) override {
    return EncoderRpc(call, "Embed", req, resp, EncoderTask::kEmbed, grpc_encoders::Embed);
  }

  grpc::ServerUnaryReactor* Classify(grpc::CallbackServerContext* call, const v1::ClassifyRequest* req,
                                     v1::ClassifyResponse* resp) override {
    return EncoderRpc(call, "Classify", req, resp, EncoderTask::kClassify, grpc_encoders::Classify);
  }

  grpc::ServerUnaryReactor* Rerank(grpc::CallbackServerContext* call, const v1::RerankRequest* req,
                                   v1::RerankResponse* resp) override {
    return EncoderRpc(call, "Rerank", req, resp, EncoderTask::kScore, grpc_encoders::Rerank);
  }

  grpc::ServerUnaryReactor* ClassifyTokens(grpc::CallbackServerContext* call, const v1::ClassifyTokensRequest* req,
                                           v1::ClassifyTokensResponse* resp) override {
    return EncoderRpc(call, "ClassifyTokens", req, resp, EncoderTask::kTokenClassify, grpc_encoders::ClassifyTokens);
  }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* call, const v1::GetModelInfoRequest*,
                                         v1::GetModelInfoResponse* resp) override {
    CallStart c;
    if (Status b = Begin(ctx_, call, "GetModelInfo", c, false); !b.ok())
      return Reject(ctx_, c, b, call->DefaultReactor());
    const service::GenerationService* service = c.service;  // null: encoders / QA only
    if (service != nullptr) {
      auto* m = resp->add_models();
      m->set_id(service->name());
      m->set_architecture(service->config().architecture);
      m->set_max_model_len(service->max_model_len());
      m->set_vocab_size(service->config().vocab_size);
      m->set_task("summarize");
      m->set_dtype(service->dtype());
      m->set_quantization(service->quantization());
      m->set_device(service->device());
      m->set_has_tokenizer(service->tokenizer() != nullptr);
    }
    if (service::QaService* qa = ctx_.qa.load()) {
      auto* q = resp->add_models();
      q->set_id(qa->name());
      q->set_architecture(qa->config().architecture);
      q->set_max_model_len(qa->config().max_position_embeddings);
      q->set_vocab_size(qa->config().vocab_size);
      q->set_task("qa");
      q->set_dtype("F32");
      q->set_device("cpu");
      q->set_has_tokenizer(true);
    }
    if (const auto* embedders = ctx_.encoders.load())
      for (service::EncoderService* e : *embedders) {
        auto* m = resp->add_models();
        m->set_id(e->name());
        m->set_architecture(e->config().architecture);
        m->set_max_model_len(e->max_input_tokens());
        m->set_vocab_size(e->config().vocab_size);
        m->set_task(e->task());
        m->set_has_tokenizer(true);
      }
    if (service != nullptr) {  // the engine's shape (0 without one)
      const EngineConfig& o = service->engine_config();
      resp->set_block_size(o.block_size);
      resp->set_num_kv_blocks(service->kv_cache().num_blocks);
      resp->set_max_num_seqs(o.scheduler.max_num_seqs);
      resp->set_max_num_batched_tokens(o.scheduler.max_num_batched_tokens);
      resp->set_max_queue_requests(o.scheduler.max_waiting_requests);
      resp->set_max_queue_tokens(o.scheduler.max_waiting_tokens);
    }
    return Reject(ctx_, c, Status::Ok(), call->DefaultReactor());
  }

 private:
  // Starts a call's generation on the pool (`start` runs there), or
  // refuses the call when the pool is full.
  template <typename Reactor, typename StartFn>
  void Prepare(Reactor* reactor, StartFn start) {
    auto link = reactor->link();
    const bool queued = pool_.TrySubmit([link, start] {
      // Read what the call needs under the lock, then work without it (the
      // reactor may go away meanwhile; the service outlives the pool).
      service::GenerationService* service = nullptr;
      double timeout = 0;
      TraceContext trace;
      {
        std::lock_guard<std::mutex> lock(link->mu);
        if (link->target == nullptr) return;
        service = link->target->service();
        timeout = link->target->timeout_seconds();
        trace = link->target->trace();
      }
      Reactor::Attach(link, start(*service, timeout, trace));
    });
    if (!queued) reactor->Refuse(kPoolFull);
  }

  ServingContext& ctx_;
  WorkPool& pool_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

struct GrpcServer::Impl {
  explicit Impl(ServingContext& c)
      : ctx(c), pool(c.work_pool ? c.work_pool : std::make_shared<WorkPool>(4, 1024)), service(c, *pool) {}
  ServingContext& ctx;
  std::shared_ptr<WorkPool> pool;
  Service service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

GrpcServer::GrpcServer(ServingContext& context) : impl_(std::make_unique<Impl>(context)) {}

GrpcServer::~GrpcServer() { Stop(); }

Status GrpcServer::Start(const GrpcServerOptions& options) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address = (options.host.find(':') != std::string::npos ? "[" + options.host + "]" : options.host) +
                              ":" + std::to_string(options.port);
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!options.tls_cert.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    const std::string cert = ReadFile(options.tls_cert), key = ReadFile(options.tls_key);
    if (cert.empty() || key.empty()) return InvalidArgument("cannot read --tls-cert / --tls-key");
    ssl.pem_key_cert_pairs.push_back({key, cert});
    creds = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(address, creds, &impl_->port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<std::size_t>(options.max_message_bytes, INT32_MAX)));
  // What one client may hold: streams per connection, and pings. Clients
  // that ping more often than every 10 s without data get GOAWAY (gRPC's
  // keepalive enforcement); the server pings idle connections every 60 s and
  // drops peers that do not answer in 20 s, and closes connections idle for
  // 10 minutes (clients reconnect transparently).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 600000);
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, 16 * 1024);
  // Memory for the transport's buffers (received messages included): past
  // it, gRPC pushes back on reads instead of growing.
  grpc::ResourceQuota quota("ropeserve-grpc");
  quota.Resize(options.memory_quota_bytes);
  builder.SetResourceQuota(quota);
  builder.RegisterService(&impl_->service);
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || impl_->port == 0)
    return FailedPrecondition("cannot listen for gRPC on " + address + " (port in use, or a bad TLS certificate?)");
  SetServing(impl_->ctx.lifecycle.ready());
  spdlog::info("gRPC{} listening on {}:{}", options.tls_cert.empty() ? "" : " (TLS)", options.host, impl_->port);
  return Status::Ok();
}

void GrpcServer::SetServing(bool serving) {
  if (!impl_->server) return;
  if (auto* h = impl_->server->GetHealthCheckService()) {
    h->SetServingStatus(serving);
    h->SetServingStatus("ropeserve.v1.Inference", serving);
  }
}

void GrpcServer::Stop(std::chrono::milliseconds grace) {
  if (impl_->server) {
    impl_->server->Shutdown(std::chrono::system_clock::now() + grace);
    impl_->server->Wait();
    impl_->server.reset();
  }
  impl_->pool->Stop();  // what was queued has run; later tasks are refused
}

int GrpcServer::port() const { return impl_->port; }

}  // namespace ropeserve::api
