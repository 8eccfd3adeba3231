// A fixed set of threads with a bounded queue, for work the gRPC front end
// must not do on gRPC's own threads: tokenizing and templating a request,
// waiting for the engine's admission verdict, selecting QA answers. When
// the queue is full TrySubmit refuses (the caller answers
// RESOURCE_EXHAUSTED) instead of letting work pile up. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ropeserve::api {

class WorkPool {
 public:
  WorkPool(int threads, std::size_t max_queued);
  ~WorkPool() { Stop(); }
  // Runs what is queued, joins the threads; later TrySubmit calls refuse.
  // Idempotent; not from a pool thread.
  void Stop();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // False when max_queued tasks are already waiting (the task is dropped).
  // A task that throws is caught and logged.
  bool TrySubmit(std::function<void()> task);

 private:
  void Run();
  const std::size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ropeserve::api
