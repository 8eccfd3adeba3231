// Runs the batches of a BatchStore: validates new ones, runs their pending
// lines through `LineExecutor` (the API layer's: the same handlers online
// requests go through, at the engine's lowest priority), records each
// result, and finalizes batches that are done, cancelled or past their
// completion window.
//
// At most `max_in_flight` lines run at once (serve --batch-max-in-flight),
// each on a worker thread of its own (a line's handler blocks until its
// request ends), so that a batch never fills the engine's queue ahead of
// interactive requests. A line whose request was refused for overload
// (429, 503) runs again a second later; every other outcome is its result.
//
// Stop() cancels the running lines without recording them: after a
// restart (or a crash: nothing here needs a clean stop) they run again,
// and the lines recorded before are never run twice (BatchStore::Record).
//
// Torch-free and model-free: tests drive it with a fake executor.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/batch/batch_store.h"

namespace ropeserve::batch {

struct LineRequest {
  std::string batch_id;
  std::string owner;
  std::string endpoint;
  std::string custom_id;
  std::string body;
};

struct LineOutcome {
  int status_code = 200;   // the request's HTTP status
  std::string body;        // its response body (JSON text)
  std::string request_id;  // "" = the body's "id" when it has one, else a new one
  // Not a result: the request was cancelled (Stop, the batch cancelled or
  // expired) or refused for overload. The line stays pending.
  bool retry = false;
};

// Runs one line. `cancelled` turns true when the line must stop (the
// executor then returns with retry set, or with whatever it had).
using LineExecutor = std::function<LineOutcome(const LineRequest&, const std::atomic<bool>& cancelled)>;

struct BatchRunnerOptions {
  int max_in_flight = 4;
  std::chrono::milliseconds poll{500};          // how often the runner looks for work when not woken
  std::chrono::milliseconds retry_after{1000};  // an overloaded line's pause
  BodyCheck check_body;                         // Validate's body reader (the endpoints' own)
};

class BatchRunner {
 public:
  BatchRunner(BatchStore& store, LineExecutor executor, BatchRunnerOptions options);
  ~BatchRunner();  // Stop()
  BatchRunner(const BatchRunner&) = delete;
  BatchRunner& operator=(const BatchRunner&) = delete;

  void Start();
  void Stop();
  // Look for work now (a batch was created or cancelled).
  void Wake();
  // Lines running now (the "running" of /metrics).
  std::int64_t running() const { return running_; }

 private:
  struct Batch {
    std::int64_t cursor = -1;  // lines up to here are queued, running or done
    int in_flight = 0;         // queued or running
    std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
    bool seen = false;  // still active in the last pass
  };
  struct Work {
    PendingLine line;
    LineRequest request;
    std::shared_ptr<std::atomic<bool>> cancel;
  };

  void Coordinate();
  void Pass();
  // Queues pending lines of in-progress batches up to max_in_flight.
  void Refill(const std::vector<BatchInfo>& running);
  void Worker();
  void Run(Work& w);
  std::string ResultLine(const Work& w, const LineOutcome& outcome) const;

  BatchStore& store_;
  LineExecutor executor_;
  BatchRunnerOptions options_;

  mutable std::mutex mu_;
  std::condition_variable wake_;  // the coordinator
  std::condition_variable work_;  // the workers
  bool stopping_ = false;
  bool woken_ = false;
  std::deque<Work> queue_;
  std::map<std::int64_t, Batch> batches_;  // by seq
  std::atomic<std::int64_t> running_{0};
  std::thread coordinator_;
  std::vector<std::thread> workers_;
};

}  // namespace ropeserve::batch
