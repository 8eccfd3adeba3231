// The reactors behind ropeserve.v1.Inference's calls (grpc_service.cc).
//
// A call's reactor is returned to gRPC at once; its work starts on the work
// pool (tokenizing, templating, the engine's admission verdict: never on a
// gRPC thread). The pool task reaches the reactor only through its Link, a
// shared mutex + pointer that OnDone clears, so a call that the client
// cancelled (and gRPC deleted) in the meantime is simply skipped.
//
// Lock discipline: `Link::mu` orders the pool task, the engine thread's
// stream notifications and gRPC's reactions. Derived::Pump(lock) runs with
// it held; every gRPC operation (StartWrite, Finish) is started after
// releasing it (a reaction may then run at once, even delete the reactor),
// and nothing touches members afterwards.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "server/api/serving_context.h"
#include "server/service/generation_service.h"

namespace ropeserve::api {

grpc::Status ToGrpc(const Status& s);

// What every Inference call starts with: a request id, the API key check,
// admission (not loading, not draining), the service, and the deadline.
struct CallStart {
  std::string method;
  std::string request_id;
  std::string peer;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  Lifecycle::Ticket ticket;
  service::GenerationService* service = nullptr;  // null when the call needs none and none is served
  double timeout_seconds = 0;                     // 0 = none
  ServerSpan span;                                // the call's trace (its traceparent metadata, else new)
};

// Fills `out`; an error when the call must be refused (UNIMPLEMENTED for a
// `generation` call on a server without a generation model).
Status Begin(ServingContext& ctx, grpc::CallbackServerContext* call, const char* method, CallStart& out,
             bool generation = true);
// Counts the call and writes its access-log line.
void Account(ServingContext& ctx, const CallStart& c, const grpc::Status& status);

// What a call accumulates over its deltas. Streams write one message per
// delta (the last has finish_reason and usage); unary calls answer once.
struct Accumulated {
  std::int64_t completion = 0;
  std::string text;
};

// The owner of a call's lock, shared with the pool task and the engine's
// notifications; `target` is null once gRPC is done with the call.
template <typename Derived>
struct CallLink {
  std::mutex mu;
  Derived* target = nullptr;
};

// What both generation reactors share: the service::Generation (attached from the
// pool), finishing and accounting.
template <typename Base, typename Derived>
class GenerationCall : public Base {
 public:
  using Link = CallLink<Derived>;
  GenerationCall(ServingContext& ctx, CallStart start)
      : ctx_(ctx), start_(std::move(start)), link_(std::make_shared<Link>()) {
    link_->target = static_cast<Derived*>(this);
  }

  std::shared_ptr<Link> link() const { return link_; }
  // With link->mu held: what the pool task needs to start the generation.
  service::GenerationService* service() const { return start_.service; }
  double timeout_seconds() const { return start_.timeout_seconds; }
  const TraceContext& trace() const { return start_.span.context; }

  // From the pool: the call's generation, or why it could not start. A call
  // that ended meanwhile drops it (its destructor cancels the request).
  static void Attach(const std::shared_ptr<Link>& link, StatusOr<std::unique_ptr<service::OutputSource>> gen) {
    std::unique_lock<std::mutex> lock(link->mu);
    Derived* self = link->target;
    if (self == nullptr || self->finish_called_) return;
    if (!gen.ok()) return self->FinishLocked(lock, ToGrpc(gen.status()));
    self->gen_ = std::move(*gen);
    self->prompt_tokens_ = self->gen_->prompt_tokens();
    // Not called inline (we hold the lock): Pump below reads what is there.
    self->gen_->SetNotify(
        [link] {
          std::unique_lock<std::mutex> l(link->mu);
          if (link->target != nullptr) link->target->Pump(l);
        },
        /*call_if_ready=*/false);
    self->Pump(lock);
  }

  // The pool had no room: refuse at once.
  void Refuse(const Status& s) {
    std::unique_lock<std::mutex> lock(link_->mu);
    FinishLocked(lock, ToGrpc(s));
  }

  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(link_->mu);
      link_->target = nullptr;
    }
    Account(ctx_, start_, final_status_);
    delete static_cast<Derived*>(this);
  }

 protected:
  void FinishLocked(std::unique_lock<std::mutex>& lock, const grpc::Status& status) {
    if (finish_called_) return;
    finish_called_ = true;
    final_status_ = status;
    if (gen_ && !status.ok()) gen_->Cancel();
    lock.unlock();
    this->Finish(status);
  }

  ServingContext& ctx_;
  CallStart start_;
  std::shared_ptr<Link> link_;
  std::unique_ptr<service::OutputSource> gen_;  // null until the pool attaches it
  std::int64_t prompt_tokens_ = 0;
  Accumulated acc_;
  bool finish_called_ = false;
  grpc::Status final_status_;
};

// A server-streaming call driven by a service::OutputSource (a Generation
// or a document summary). `Fill` turns a delta into
// the next message.
template <typename Msg>
class StreamCall final : public GenerationCall<grpc::ServerWriteReactor<Msg>, StreamCall<Msg>> {
  using Base = GenerationCall<grpc::ServerWriteReactor<Msg>, StreamCall<Msg>>;
  friend Base;

 public:
  using Fill = std::function<void(const service::OutputDelta&, std::int64_t prompt_tokens, Accumulated&, Msg&)>;
  StreamCall(ServingContext& ctx, CallStart start, Fill fill) : Base(ctx, std::move(start)), fill_(std::move(fill)) {}

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(this->link_->mu);
    writing_ = false;
    if (!ok) return this->FinishLocked(lock, grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
    if (last_written_) return this->FinishLocked(lock, grpc::Status::OK);
    Pump(lock);
  }

  void OnCancel() override {
    std::unique_lock<std::mutex> lock(this->link_->mu);
    if (this->gen_) this->gen_->Cancel();
    if (!writing_) this->FinishLocked(lock, grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }

 private:
  void Pump(std::unique_lock<std::mutex>& lock) {
    if (this->finish_called_ || writing_ || !this->gen_) return;
    auto d = this->gen_->Next(std::chrono::milliseconds(0));
    if (!d.ok()) return this->FinishLocked(lock, ToGrpc(d.status()));
    if (d->ids.empty() && d->text.empty() && !d->finished && !d->progress) return;
    msg_.Clear();
    fill_(*d, this->prompt_tokens_, this->acc_, msg_);
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

// A unary call answered when its service::Generation ends. `Done` fills the response.
class UnaryCall final : public GenerationCall<grpc::ServerUnaryReactor, UnaryCall> {
  using Base = GenerationCall<grpc::ServerUnaryReactor, UnaryCall>;
  friend Base;

 public:
  using Done = std::function<void(const service::OutputDelta& last, std::int64_t prompt_tokens, const Accumulated&)>;
  UnaryCall(ServingContext& ctx, CallStart start, Done done) : Base(ctx, std::move(start)), done_(std::move(done)) {}

  void OnCancel() override {
    std::unique_lock<std::mutex> lock(link_->mu);
    FinishLocked(lock, grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }

 private:
  void Pump(std::unique_lock<std::mutex>& lock) {
    if (finish_called_ || !gen_) return;
    // A document summary hands out one progress delta at a time: read on
    // until nothing is new.
    while (true) {
      auto d = gen_->Next(std::chrono::milliseconds(0));
      if (!d.ok()) return FinishLocked(lock, ToGrpc(d.status()));
      acc_.completion += static_cast<std::int64_t>(d->ids.size());
      acc_.text += d->text;
      if (d->finished) {
        done_(*d, prompt_tokens_, acc_);
        return FinishLocked(lock, grpc::Status::OK);
      }
      if (d->ids.empty() && d->text.empty() && !d->progress) return;
    }
  }

  Done done_;
};

// A unary call finished from another thread once (QA answers). `Complete`
// runs `fill` and finishes, unless the call ended meanwhile; a client
// cancel finishes it at once and runs `on_cancel`.
class DeferredUnaryCall final : public grpc::ServerUnaryReactor {
 public:
  using Link = CallLink<DeferredUnaryCall>;
  DeferredUnaryCall(ServingContext& ctx, CallStart start)
      : ctx_(ctx), start_(std::move(start)), link_(std::make_shared<Link>()) {
    link_->target = this;
  }
  std::shared_ptr<Link> link() const { return link_; }
  // With link->mu held: what to do when the client cancels; false (and
  // `fn` is not kept) when the call has ended already.
  bool SetOnCancelLocked(std::function<void()> fn) {
    if (finish_called_) return false;
    on_cancel_ = std::move(fn);
    return true;
  }
  // Finishes the call with `status`, running `fill` (which writes the
  // response) first when it is OK; nothing if the call ended meanwhile.
  static void Complete(const std::shared_ptr<Link>& link, const Status& status, const std::function<void()>& fill) {
    std::unique_lock<std::mutex> lock(link->mu);
    DeferredUnaryCall* self = link->target;
    if (self == nullptr || self->finish_called_) return;
    if (status.ok() && fill) fill();
    self->FinishLocked(lock, ToGrpc(status));
  }
  void OnCancel() override {
    std::unique_lock<std::mutex> lock(link_->mu);
    if (on_cancel_) on_cancel_();
    FinishLocked(lock, grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }
  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(link_->mu);
      link_->target = nullptr;
    }
    Account(ctx_, start_, final_status_);
    delete this;
  }

 private:
  void FinishLocked(std::unique_lock<std::mutex>& lock, const grpc::Status& status) {
    if (finish_called_) return;
    finish_called_ = true;
    final_status_ = status;
    lock.unlock();
    Finish(status);
  }
  ServingContext& ctx_;
  CallStart start_;
  std::shared_ptr<Link> link_;
  std::function<void()> on_cancel_;
  bool finish_called_ = false;
  grpc::Status final_status_;
};

}  // namespace ropeserve::api
