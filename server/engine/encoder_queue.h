// Encoder-only work (extractive-QA windows, inputs to embed) for the engine's steps.
//
// A job is one request's windows (or several requests packed by the
// caller); each window is a token count to the scheduler. Drivers take
// windows first come, first served within a token budget, run them in one
// packed forward through an EncoderRunner, and the runner delivers the
// results into the jobs. Windows keep no KV blocks after their forward.
//
// The engine drives the queue inside its steps, sharing the step's token
// budget with decodes and prefill chunks (Engine::AttachEncoder); a process
// without an engine drives it from its own thread (RunEncoderWorker).
// Thread-safe; torch-free.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "server/common/status.h"

namespace ropeserve {

class EncoderJob {
 public:
  virtual ~EncoderJob() = default;
  virtual std::size_t num_windows() const = 0;
  virtual std::int64_t window_tokens(std::size_t window) const = 0;
  // Thread-safe. A cancelled job's remaining windows are dropped (and the
  // job told so through Fail); a job past its deadline counts as cancelled.
  virtual bool cancelled() const = 0;
  // The job will get no (more) results: the queue closed, the job was
  // cancelled or ran out of time, or its forward failed. Wakes its waiter.
  virtual void Fail(const Status& status) = 0;
};

struct EncoderItem {
  std::shared_ptr<EncoderJob> job;
  std::size_t window = 0;
};

// Runs items in one packed forward and delivers each item's result (or the
// error) to its job. Called from one driver thread at a time.
class EncoderRunner {
 public:
  virtual ~EncoderRunner() = default;
  virtual void Run(std::span<const EncoderItem> items) = 0;
};

class EncoderQueue {
 public:
  explicit EncoderQueue(std::size_t max_jobs = 1024) : max_jobs_(max_jobs) {}

  // ResourceExhausted when max_jobs are waiting; the close status once closed.
  Status Push(std::shared_ptr<EncoderJob> job);

  // Windows in arrival order while their tokens fit in `budget`; with
  // `at_least_one`, one window when any is waiting even if it does not fit
  // (a window is never split, so it may exceed a small budget). Drops
  // cancelled jobs, failing them.
  std::vector<EncoderItem> Take(std::int64_t budget, bool at_least_one = true);

  // Tokens of the windows not yet taken (cancelled jobs excluded).
  std::int64_t pending_tokens() const;
  bool has_work() const { return pending_tokens() > 0; }

  // Called after every Push (outside the queue's lock): wakes the driver.
  void SetWake(std::function<void()> wake);

  // Fails every waiting job with `status`; later pushes fail with it too.
  void Close(const Status& status);

  // Waits (up to 100 ms) until there is work or `stop()` holds after a
  // wake, then Take. For drivers without an engine.
  std::vector<EncoderItem> WaitAndTake(std::int64_t budget, const std::function<bool()>& stop);
  // Wakes WaitAndTake (e.g. after setting the stop flag).
  void Wake();

 private:
  struct Entry {
    std::shared_ptr<EncoderJob> job;
    std::size_t next = 0;  // first window not taken
  };
  std::int64_t PendingLocked() const;
  void DropCancelledLocked(std::vector<std::shared_ptr<EncoderJob>>& dropped);

  const std::size_t max_jobs_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> jobs_;
  std::function<void()> wake_;
  bool closed_ = false;
  Status close_status_;
};

// A driver thread body for a queue that no engine steps: runs batches of at
// most `budget` tokens until `stop()` (checked after each wake).
void RunEncoderWorker(EncoderQueue& queue, EncoderRunner& runner, std::int64_t budget,
                      const std::function<bool()>& stop);

}  // namespace ropeserve
