#include "server/api/grpc_service.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "proto/ropeserve/v1/ropeserve.grpc.pb.h"
#include "server/api/error_mapping.h"
#include "server/api/logging.h"
#include "server/api/model_service.h"
#include "server/runner/qa_service.h"
#include "server/api/serving_context.h"

namespace ropeserve::api {

namespace v1 = ::ropeserve::v1;

namespace {

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(GrpcCodeFor(s.code())), s.message());
}

const char* GrpcCodeName(grpc::StatusCode code) {
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "UNKNOWN";
}

std::string Metadata(const grpc::CallbackServerContext* ctx, const char* key) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

// What every Inference call starts with: a request id, the API key check,
// admission (not loading, not draining), the service, and the deadline.
struct CallStart {
  std::string method;
  std::string request_id;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  Lifecycle::Ticket ticket;
  ModelService* service = nullptr;
  double timeout_seconds = 0;  // 0 = none
};

Status Begin(ServingContext& ctx, grpc::CallbackServerContext* call, const char* method, CallStart& out) {
  out.method = method;
  out.request_id = RequestIdOrNew(Metadata(call, "x-request-id"));
  call->AddInitialMetadata("x-request-id", out.request_id);
  RS_RETURN_IF_ERROR(ctx.api_keys.Check(Metadata(call, "authorization")));
  RS_ASSIGN_OR_RETURN(out.ticket, ctx.lifecycle.Admit());
  out.service = ctx.service.load();
  if (out.service == nullptr) return Unavailable("the server is still loading its models");
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

// Counts the call and writes its access-log line.
void Account(ServingContext& ctx, const CallStart& c, const grpc::Status& status, const std::string& peer) {
  const char* code = GrpcCodeName(status.error_code());
  if (ctx.metrics != nullptr) ctx.metrics->CountRequest(c.method, "grpc", code);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c.start).count();
  LogAccess("grpc call", {{"method", c.method},
                          {"code", code},
                          {"duration_ms", std::round(ms * 100) / 100},
                          {"request_id", c.request_id},
                          {"remote", peer}});
}

void FillSampling(const v1::SamplingParams& s, SamplingParams& out) {
  out.temperature = s.temperature();
  out.top_p = s.top_p() == 0 ? 1.0 : s.top_p();
  out.top_k = s.top_k();
  out.min_p = s.min_p();
  if (s.has_seed()) out.seed = s.seed();
  if (s.has_repetition_penalty()) out.repetition_penalty = s.repetition_penalty();
  out.frequency_penalty = s.frequency_penalty();
  out.presence_penalty = s.presence_penalty();
}

void FillUsage(v1::Usage* u, std::int64_t prompt, std::int64_t completion, std::int64_t cached) {
  u->set_prompt_tokens(prompt);
  u->set_completion_tokens(completion);
  u->set_cached_tokens(cached);
}

// What a call accumulates over its deltas. Streams write one message per
// delta (the last has finish_reason and usage); unary calls answer once.
struct Accumulated {
  std::int64_t completion = 0;
  std::string text;
};

// What both reactor kinds share: the running Generation, the lock that
// orders the engine thread's notifications against gRPC's reactions, and
// finishing + accounting. The notification holds the lock's owner (Link)
// by shared_ptr: after the reactor is gone it finds `target` null and does
// nothing. `Derived::Pump(lock)` is called with the lock held; every gRPC
// operation is started after releasing it (a reaction may then run at once,
// even delete the reactor), and nothing touches members afterwards.
template <typename Base, typename Derived>
class GenerationCall : public Base {
 public:
  GenerationCall(ServingContext& ctx, CallStart start, std::string peer, std::unique_ptr<Generation> gen)
      : ctx_(ctx), start_(std::move(start)), peer_(std::move(peer)), gen_(std::move(gen)),
        link_(std::make_shared<Link>()) {}

  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(link_->mu);
      link_->target = nullptr;
    }
    Account(ctx_, start_, final_status_, peer_);
    delete static_cast<Derived*>(this);
  }

 protected:
  struct Link {
    std::mutex mu;
    Derived* target = nullptr;
  };
  // Connects the generation's notifications. Called at the end of the
  // derived constructor: a notification may run Pump at once.
  void Arm() {
    link_->target = static_cast<Derived*>(this);
    gen_->SetNotify([link = link_] {
      std::unique_lock<std::mutex> lock(link->mu);
      if (link->target != nullptr) link->target->Pump(lock);
    });
  }
  void FinishLocked(std::unique_lock<std::mutex>& lock, const grpc::Status& status) {
    if (finish_called_) return;
    finish_called_ = true;
    final_status_ = status;
    lock.unlock();
    this->Finish(status);
  }

  ServingContext& ctx_;
  CallStart start_;
  std::string peer_;
  std::unique_ptr<Generation> gen_;
  std::shared_ptr<Link> link_;
  Accumulated acc_;
  bool finish_called_ = false;
  grpc::Status final_status_;
};

// A server-streaming call driven by a Generation. `Fill` turns a delta into
// the next message.
template <typename Msg>
class StreamCall final : public GenerationCall<grpc::ServerWriteReactor<Msg>, StreamCall<Msg>> {
  using Base = GenerationCall<grpc::ServerWriteReactor<Msg>, StreamCall<Msg>>;
  friend Base;

 public:
  using Fill = std::function<void(const Generation::Delta&, Accumulated&, Msg&)>;
  StreamCall(ServingContext& ctx, CallStart start, std::string peer, std::unique_ptr<Generation> gen, Fill fill)
      : Base(ctx, std::move(start), std::move(peer), std::move(gen)), fill_(std::move(fill)) {
    this->Arm();
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(this->link_->mu);
    writing_ = false;
    if (!ok) return this->FinishLocked(lock, grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
    if (last_written_) return this->FinishLocked(lock, grpc::Status::OK);
    Pump(lock);
  }

  void OnCancel() override {
    std::unique_lock<std::mutex> lock(this->link_->mu);
    this->gen_->Cancel();
    if (!writing_) this->FinishLocked(lock, grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }

 private:
  void Pump(std::unique_lock<std::mutex>& lock) {
    if (this->finish_called_ || writing_) return;
    auto d = this->gen_->Next(std::chrono::milliseconds(0));
    if (!d.ok()) return this->FinishLocked(lock, ToGrpc(d.status()));
    if (d->ids.empty() && d->text.empty() && !d->finished) return;
    msg_.Clear();
    fill_(*d, this->acc_, msg_);
    writing_ = true;
    last_written_ = d->finished;
    lock.unlock();
    this->StartWrite(&msg_);
  }

  Fill fill_;
  Msg msg_;
  bool writing_ = false;
  bool last_written_ = false;
};

// A unary call answered when its Generation ends. `Done` fills the response.
class UnaryCall final : public GenerationCall<grpc::ServerUnaryReactor, UnaryCall> {
  using Base = GenerationCall<grpc::ServerUnaryReactor, UnaryCall>;
  friend Base;

 public:
  using Done = std::function<void(const Generation::Delta& last, const Accumulated&)>;
  UnaryCall(ServingContext& ctx, CallStart start, std::string peer, std::unique_ptr<Generation> gen, Done done)
      : Base(ctx, std::move(start), std::move(peer), std::move(gen)), done_(std::move(done)) {
    Arm();
  }

  void OnCancel() override {
    std::unique_lock<std::mutex> lock(link_->mu);
    gen_->Cancel();
    FinishLocked(lock, grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }

 private:
  void Pump(std::unique_lock<std::mutex>& lock) {
    if (finish_called_) return;
    auto d = gen_->Next(std::chrono::milliseconds(0));
    if (!d.ok()) return FinishLocked(lock, ToGrpc(d.status()));
    acc_.completion += static_cast<std::int64_t>(d->ids.size());
    acc_.text += d->text;
    if (!d->finished) return;
    done_(*d, acc_);
    FinishLocked(lock, grpc::Status::OK);
  }

  Done done_;
};

// Summarize / SummarizeStream: validation and the generation.
StatusOr<std::unique_ptr<Generation>> StartSummary(const CallStart& c, const v1::SummarizeRequest& req) {
  ModelService& service = *c.service;
  RS_RETURN_IF_ERROR(service.CheckModelName(req.model()));
  if (req.text().empty()) return InvalidArgument("'text' is required");
  RS_ASSIGN_OR_RETURN(auto ids, service.SummaryPrompt(req.text(), req.instruction()));
  GenerateOptions o;
  FillSampling(req.sampling(), o.sampling);
  const std::int64_t room = std::max<std::int64_t>(1, service.max_model_len() - static_cast<std::int64_t>(ids.size()));
  if (req.max_tokens() < 0 || req.max_tokens() > service.max_model_len())
    return InvalidArgument("max_tokens must be between 0 and the context length " +
                           std::to_string(service.max_model_len()));
  o.max_tokens = req.max_tokens() == 0 ? std::min<std::int64_t>(256, room) : req.max_tokens();
  for (const auto& st : req.stop()) o.stop.push_back(st);
  o.timeout_seconds = c.timeout_seconds;
  return service.Start(ids, o);
}

StatusOr<std::unique_ptr<Generation>> StartGenerate(const CallStart& c, const v1::GenerateRequest& req) {
  ModelService& service = *c.service;
  RS_RETURN_IF_ERROR(service.CheckModelName(req.model()));
  GenerateOptions o;
  if (req.max_tokens() < 0 || req.max_tokens() > service.max_model_len())
    return InvalidArgument("max_tokens must be between 0 and the context length " +
                           std::to_string(service.max_model_len()));
  o.max_tokens = req.max_tokens() == 0 ? 16 : req.max_tokens();
  FillSampling(req.sampling(), o.sampling);
  o.min_tokens = req.min_tokens();
  o.top_logprobs = req.top_logprobs();
  o.ignore_eos = req.ignore_eos();
  for (const auto& st : req.stop()) o.stop.push_back(st);
  o.stop_token_ids.assign(req.stop_token_ids().begin(), req.stop_token_ids().end());
  o.timeout_seconds = c.timeout_seconds;
  std::vector<std::int64_t> ids(req.prompt_ids().begin(), req.prompt_ids().end());
  if (!req.prompt().empty()) {
    if (!ids.empty()) return InvalidArgument("give either prompt_ids or prompt, not both");
    RS_ASSIGN_OR_RETURN(ids, service.Tokenize(req.prompt(), /*add_special_tokens=*/true));
  }
  if (ids.empty()) return InvalidArgument("prompt_ids (or prompt) is required");
  return service.Start(ids, o);
}

// Finishes a call that needs no generation (or failed before starting one).
template <typename Reactor>
Reactor* Reject(ServingContext& ctx, const CallStart& c, const Status& s, const std::string& peer, Reactor* reactor) {
  Account(ctx, c, ToGrpc(s), peer);
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

class Service final : public v1::Inference::CallbackService {
 public:
  explicit Service(ServingContext& ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* Summarize(grpc::CallbackServerContext* call, const v1::SummarizeRequest* req,
                                      v1::SummarizeResponse* resp) override {
    CallStart c;
    const std::string peer = call->peer();
    if (Status b = Begin(ctx_, call, "Summarize", c); !b.ok()) return Reject(ctx_, c, b, peer, call->DefaultReactor());
    auto gen = StartSummary(c, *req);
    if (!gen.ok()) return Reject(ctx_, c, gen.status(), peer, call->DefaultReactor());
    const std::string id = c.service->NextRequestId("sum");
    const std::string model = c.service->name();
    const std::int64_t prompt = (*gen)->prompt_tokens();
    return new UnaryCall(ctx_, std::move(c), peer, std::move(*gen),
                         [resp, id, model, prompt](const Generation::Delta& last, const Accumulated& acc) {
                           resp->set_id(id);
                           resp->set_model(model);
                           resp->set_summary(acc.text);
                           resp->set_finish_reason(last.finish_reason);
                           FillUsage(resp->mutable_usage(), prompt, acc.completion, last.cached_tokens);
                         });
  }

  grpc::ServerWriteReactor<v1::SummarizeChunk>* SummarizeStream(grpc::CallbackServerContext* call,
                                                                const v1::SummarizeRequest* req) override {
    CallStart c;
    const std::string peer = call->peer();
    const Status b = Begin(ctx_, call, "SummarizeStream", c);
    StatusOr<std::unique_ptr<Generation>> gen = b.ok() ? StartSummary(c, *req) : b;
    if (!gen.ok()) {
      Account(ctx_, c, ToGrpc(gen.status()), peer);
      return new FailedStream<v1::SummarizeChunk>(ToGrpc(gen.status()));
    }
    const std::string id = c.service->NextRequestId("sum");
    const std::int64_t prompt = (*gen)->prompt_tokens();
    return new StreamCall<v1::SummarizeChunk>(
        ctx_, std::move(c), peer, std::move(*gen),
        [id, prompt](const Generation::Delta& d, Accumulated& acc, v1::SummarizeChunk& m) {
          acc.completion += static_cast<std::int64_t>(d.ids.size());
          m.set_id(id);
          m.set_delta(d.text);
          if (d.finished) {
            m.set_finish_reason(d.finish_reason);
            FillUsage(m.mutable_usage(), prompt, acc.completion, d.cached_tokens);
          }
        });
  }

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* call,
                                                           const v1::GenerateRequest* req) override {
    CallStart c;
    const std::string peer = call->peer();
    const Status b = Begin(ctx_, call, "Generate", c);
    StatusOr<std::unique_ptr<Generation>> gen = b.ok() ? StartGenerate(c, *req) : b;
    if (!gen.ok()) {
      Account(ctx_, c, ToGrpc(gen.status()), peer);
      return new FailedStream<v1::GenerateResponse>(ToGrpc(gen.status()));
    }
    const std::string id = c.service->NextRequestId("gen");
    const std::string model = c.service->name();
    const std::int64_t prompt = (*gen)->prompt_tokens();
    return new StreamCall<v1::GenerateResponse>(
        ctx_, std::move(c), peer, std::move(*gen),
        [id, model, prompt](const Generation::Delta& d, Accumulated& acc, v1::GenerateResponse& m) {
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
  }

  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* call, const v1::AnswerRequest* req,
                                   v1::AnswerResponse* resp) override {
    CallStart c;
    const std::string peer = call->peer();
    auto* reactor = call->DefaultReactor();
    if (Status b = Begin(ctx_, call, "Answer", c); !b.ok()) return Reject(ctx_, c, b, peer, reactor);
    QaService* qa = ctx_.qa.load();
    if (qa == nullptr) return Reject(ctx_, c, Unimplemented("no QA model is loaded (serve --qa DIR)"), peer, reactor);
    if (!req->model().empty() && req->model() != qa->name())
      return Reject(ctx_, c, NotFound("model '" + req->model() + "' does not exist (QA model: '" + qa->name() + "')"),
                    peer, reactor);
    QaRequest r;
    r.question = req->question();
    r.context = req->context();
    r.options.top_k = req->top_k() == 0 ? 1 : req->top_k();
    r.options.max_answer_len = req->max_answer_len() == 0 ? 15 : req->max_answer_len();
    r.options.handle_impossible_answer = req->handle_impossible_answer();
    if (!req->scoring().empty() && req->scoring() != "pipeline" && req->scoring() != "logits")
      return Reject(ctx_, c, InvalidArgument("scoring must be \"pipeline\" or \"logits\""), peer, reactor);
    r.options.scoring = req->scoring() == "logits" ? qa::Scoring::kLogits : qa::Scoring::kPipeline;
    r.windows.max_seq_len = req->max_seq_len() == 0 ? 384 : req->max_seq_len();
    if (req->doc_stride() != 0) r.windows.doc_stride = req->doc_stride();
    r.windows.max_question_len = req->max_question_len() == 0 ? 64 : req->max_question_len();
    if (r.options.top_k < 0 || r.options.top_k > 100 || r.options.max_answer_len < 0 || r.windows.max_seq_len < 8 ||
        req->doc_stride() < 0 || req->doc_stride() >= r.windows.max_seq_len || r.windows.max_question_len < 1)
      return Reject(ctx_, c,
                    InvalidArgument("top_k, max_answer_len, max_seq_len, doc_stride or max_question_len out of range"),
                    peer, reactor);
    // The caller waits for the engine steps that run the windows: off
    // gRPC's threads. The admission ticket travels with it, so a drain
    // waits for the answer.
    auto start = std::make_shared<CallStart>(std::move(c));
    std::thread([this, qa, r, resp, reactor, start, peer] {
      auto result = qa->Answer(r, start->timeout_seconds);
      grpc::Status status = ToGrpc(result.status());
      if (result.ok()) {
        resp->set_id(qa->NextRequestId());
        resp->set_model(qa->name());
        for (const auto& a : result->answers) {
          auto* out = resp->add_answers();
          out->set_text(a.text);
          out->set_score(a.score);
          out->set_start(a.start);
          out->set_end(a.end);
        }
        resp->mutable_usage()->set_prompt_tokens(result->tokens);
      }
      Account(ctx_, *start, status, peer);
      reactor->Finish(status);
    }).detach();
    return reactor;
  }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* call, const v1::GetModelInfoRequest*,
                                         v1::GetModelInfoResponse* resp) override {
    CallStart c;
    const std::string peer = call->peer();
    if (Status b = Begin(ctx_, call, "GetModelInfo", c); !b.ok()) return Reject(ctx_, c, b, peer, call->DefaultReactor());
    ModelService& service = *c.service;
    auto* m = resp->add_models();
    m->set_id(service.name());
    m->set_architecture(service.config().architecture);
    m->set_max_model_len(service.max_model_len());
    m->set_vocab_size(service.config().vocab_size);
    m->set_task("summarize");
    m->set_dtype(service.dtype());
    m->set_device("cpu");
    m->set_has_tokenizer(service.tokenizer() != nullptr);
    if (QaService* qa = ctx_.qa.load()) {
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
    const EngineOptions& o = service.options();
    resp->set_block_size(o.block_size);
    resp->set_num_kv_blocks(service.kv_cache().num_blocks);
    resp->set_max_num_seqs(o.scheduler.max_num_seqs);
    resp->set_max_num_batched_tokens(o.scheduler.max_num_batched_tokens);
    resp->set_max_queue_requests(o.scheduler.max_waiting_requests);
    resp->set_max_queue_tokens(o.scheduler.max_waiting_tokens);
    return Reject(ctx_, c, Status::Ok(), peer, call->DefaultReactor());
  }

 private:
  ServingContext& ctx_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

struct GrpcServer::Impl {
  explicit Impl(ServingContext& c) : ctx(c), service(c) {}
  ServingContext& ctx;
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
}

int GrpcServer::port() const { return impl_->port; }

}  // namespace ropeserve::api
