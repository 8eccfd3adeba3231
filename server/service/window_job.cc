#include "server/service/window_job.h"

#include <algorithm>

#include "server/engine/engine.h"

namespace ropeserve::service {

void WindowJob::SetTimeout(Clock::time_point start, double timeout_seconds) {
  if (timeout_seconds > 0)
    deadline = start + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(std::min(timeout_seconds, 1e7)));
}

void WindowJob::Fail(const Status& status) {
  const bool late = deadline && Clock::now() > *deadline;
  Complete(late ? TimedOut() : status);
}

void WindowJob::Deliver(std::size_t w, StatusOr<SpanLogits> result) {
  bool all = false;
  Status error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (result.ok()) {
      outputs_[w] = std::move(*result);
    } else if (error_.ok()) {
      error_ = result.status();
    }
    all = ++done_ == windows.size();
    error = error_;
  }
  if (all) Complete(error);
}

Status WindowJob::Wait(bool (*abandoned)()) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto until = Clock::now() + std::chrono::milliseconds(200);
    if (deadline) until = std::min(until, *deadline);
    if (cv_.wait_until(lock, until, [&] { return complete_; })) return error_;
    if (deadline && Clock::now() >= *deadline) {
      cancelled_ = true;  // the queue drops its remaining windows
      return TimedOut();
    }
    if (abandoned != nullptr && abandoned()) {
      cancelled_ = true;
      return Status(ErrorCode::kCancelled, "the client disconnected");
    }
  }
}

void WindowJob::Complete(const Status& status) {
  std::function<void(const Status&)> callback;
  Status result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (complete_) return;
    complete_ = true;
    if (error_.ok()) error_ = status;
    result = error_;
    callback = std::move(on_complete);
  }
  cv_.notify_all();
  if (callback) callback(result);
}

void WindowRunner::Run(std::span<const EncoderItem> items) {
  std::vector<std::vector<TokenId>> inputs;
  std::vector<std::vector<std::uint32_t>> types;
  for (const auto& it : items) {
    auto& job = static_cast<WindowJob&>(*it.job);
    inputs.push_back(job.windows[it.window]);
    types.push_back(job.type_ids.empty() ? std::vector<std::uint32_t>() : job.type_ids[it.window]);
  }
  auto out = model_.ForwardWindows(inputs, types, /*with_hidden=*/false);
  for (std::size_t b = 0; b < items.size(); ++b) {
    auto& job = static_cast<WindowJob&>(*items[b].job);
    job.Deliver(items[b].window, out.ok() ? StatusOr<SpanLogits>(std::move((*out)[b])) : out.status());
  }
}

StatusOr<std::unique_ptr<EncoderLane>> EncoderLane::Create(const SpanModel& model, Engine* engine,
                                                           std::int64_t max_jobs, std::int64_t max_batch_tokens,
                                                           const std::string& what) {
  if (max_batch_tokens < 1) return InvalidArgument("the " + what + " batch budget must be positive");
  if (max_jobs < 1) return InvalidArgument("the " + what + " queue must hold at least one request");
  return std::unique_ptr<EncoderLane>(new EncoderLane(model, engine, static_cast<std::size_t>(max_jobs),
                                                      max_batch_tokens, "the " + what + " service stopped"));
}

EncoderLane::EncoderLane(const SpanModel& model, Engine* engine, std::size_t max_jobs, std::int64_t max_batch_tokens,
                         std::string stopped)
    : engine_(engine), queue_(max_jobs), runner_(model), stopped_(std::move(stopped)) {
  if (engine_ != nullptr) {
    engine_->AttachEncoder(&queue_, &runner_);
  } else {
    worker_ = std::thread([this, max_batch_tokens] {
      RunEncoderWorker(queue_, runner_, max_batch_tokens, [this] { return stop_.load(); });
    });
  }
}

Status EncoderLane::PushAsync(const std::shared_ptr<WindowJob>& job, const Post* post, std::function<void()> finish,
                              std::function<void(const Status&)> fail) {
  // The job holds the callback, the callback the caller's state; the cycle
  // ends when the callback runs (Complete moves it out of the job).
  job->on_complete = [post, finish = std::move(finish), fail = std::move(fail)](const Status& status) {
    if (!status.ok()) return fail(status);
    if (post == nullptr || !*post || !(*post)(finish)) finish();
  };
  if (Status s = Push(job); !s.ok()) {
    job->on_complete = nullptr;
    return s;
  }
  return Status::Ok();
}

EncoderLane::~EncoderLane() {
  if (engine_ != nullptr) engine_->DetachEncoder(&queue_);
  stop_ = true;
  queue_.Wake();
  if (worker_.joinable()) worker_.join();
  queue_.Close(Status(ErrorCode::kUnavailable, stopped_));
}

}  // namespace ropeserve::service
