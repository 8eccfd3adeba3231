// An encoder call's windows as one job of the engine's encoder queue
// (server/engine/encoder_queue.h), the runner that computes them through a
// SpanModel, and the lane that drives a service's queue: shared by the QA
// service and the embedding service.
// A job completes once: when the last window's output is in, or when it
// fails (queue closed, forward failed, cancelled, deadline). Torch-free.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "server/common/status.h"
#include "server/engine/encoder_queue.h"
#include "server/models/span_model.h"

namespace ropeserve {
class Engine;  // server/engine/engine.h
}

namespace ropeserve::service {

// A call in flight (the services' async calls); Cancel() drops its
// remaining windows and completes it with Cancelled. Thread-safe.
class EncoderCall {
 public:
  virtual ~EncoderCall() = default;
  virtual void Cancel() = 0;
};

class WindowJob : public EncoderJob, public EncoderCall {
 public:
  using Clock = std::chrono::steady_clock;

  // `what` names the call in the timeout error ("the QA request").
  explicit WindowJob(std::string what) : what_(std::move(what)) {}

  std::vector<std::vector<TokenId>> windows;
  std::vector<std::vector<std::uint32_t>> type_ids;  // per window; may be empty
  std::optional<Clock::time_point> deadline;
  // Async calls: runs once on completion (Ok or the failure), without the lock.
  std::function<void(const Status&)> on_complete;

  // Sets the deadline `timeout_seconds` after `start` (none when <= 0).
  void SetTimeout(Clock::time_point start, double timeout_seconds);
  // Call once the windows are in, before the job is queued.
  void Prepare() { outputs_.resize(windows.size()); }

  std::size_t num_windows() const override { return windows.size(); }
  std::int64_t window_tokens(std::size_t w) const override { return static_cast<std::int64_t>(windows[w].size()); }
  bool cancelled() const override { return cancelled_ || (deadline && Clock::now() > *deadline); }
  void Fail(const Status& status) override;
  void Cancel() override { cancelled_ = true; }

  void Deliver(std::size_t w, StatusOr<SpanLogits> result);
  // Sync calls: waits for completion; DeadlineExceeded after the deadline,
  // Cancelled when `abandoned` (polled every 200 ms) says so.
  Status Wait(bool (*abandoned)());
  SpanLogits& output(std::size_t w) { return outputs_[w]; }

 private:
  Status TimedOut() const { return Status(ErrorCode::kDeadlineExceeded, what_ + " timed out"); }
  void Complete(const Status& status);

  const std::string what_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SpanLogits> outputs_;
  std::size_t done_ = 0;
  bool complete_ = false;
  Status error_;
};

// Runs the windows the engine scheduled in one step through the model in
// one call (every item's job must be a WindowJob); each window is computed
// on tensors of its own shape (not padded into one batch), so its output
// does not depend on the others.
class WindowRunner : public EncoderRunner {
 public:
  explicit WindowRunner(const SpanModel& model) : model_(model) {}
  void Run(std::span<const EncoderItem> items) override;

 private:
  const SpanModel& model_;
};

// A service's encoder queue and what drives it: the engine's steps (the
// queue is attached while the lane lives) or, without an engine, a worker
// thread running forwards of at most `max_batch_tokens`. Destroying the
// lane detaches it, stops the worker and fails the jobs still waiting with
// Unavailable(`stopped`). Thread-safe.
class EncoderLane {
 public:
  // `model` and `engine` (when not null) must outlive the lane. `what`
  // names the service in errors ("QA", "embedding"). InvalidArgument when
  // max_jobs or max_batch_tokens is below 1.
  static StatusOr<std::unique_ptr<EncoderLane>> Create(const SpanModel& model, Engine* engine, std::int64_t max_jobs,
                                                       std::int64_t max_batch_tokens, const std::string& what);
  ~EncoderLane();
  EncoderLane(const EncoderLane&) = delete;
  EncoderLane& operator=(const EncoderLane&) = delete;

  // ResourceExhausted when full; Unavailable once stopped.
  Status Push(std::shared_ptr<WindowJob> job) { return queue_.Push(std::move(job)); }
  // Queues `job` for an async call: when it completes, `fail` runs with a
  // failure, else `finish` runs on `post` (inline when `post` is unset or
  // full; `post` must outlive the job). A refused push drops both and
  // returns the refusal.
  using Post = std::function<bool(std::function<void()>)>;
  Status PushAsync(const std::shared_ptr<WindowJob>& job, const Post* post, std::function<void()> finish,
                   std::function<void(const Status&)> fail);

 private:
  EncoderLane(const SpanModel& model, Engine* engine, std::size_t max_jobs, std::int64_t max_batch_tokens,
              std::string stopped);
  Engine* const engine_;
  EncoderQueue queue_;
  WindowRunner runner_;
  const std::string stopped_;
  std::atomic<bool> stop_{false};
  std::thread worker_;  // only without an engine
};

}  // namespace ropeserve::service
