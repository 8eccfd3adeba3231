#include "kernels/cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cpu/kernel_config.h"

namespace ropeserve::cpu {
namespace {

using Clock = std::chrono::steady_clock;

thread_local bool t_in_pool = false;  // a pool worker, or a caller while its job runs

inline void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

std::int64_t SpinMicros() { return GetKernelConfig().pool_spin_us; }

// Spins (yielding the core every few microseconds, so that a runnable
// OpenMP thread gets it) until done() or the spin time is over; true if done.
template <typename Done>
bool SpinUntil(const Done& done) {
  const auto deadline = Clock::now() + std::chrono::microseconds(SpinMicros());
  for (int i = 1;; ++i) {
    if (done()) return true;
    if (i % 64 == 0) {
      if (Clock::now() >= deadline) return false;
      sched_yield();
    } else {
      Pause();
    }
  }
}

class Pool {
 public:
  void Run(std::int64_t begin, std::int64_t end, std::int64_t chunk, int chunks, detail::RangeFn fn, const void* ctx) {
    std::lock_guard<std::mutex> submit(submit_mu_);
    while (static_cast<int>(workers_.size()) < chunks - 1) {
      // A new worker waits for the next job, not one that already went by
      // (generation_ only moves under submit_mu_, which this thread holds).
      const int index = static_cast<int>(workers_.size());
      const std::uint64_t seen = generation_.load();
      workers_.emplace_back([this, index, seen] { Work(index, seen); });
      workers_.back().detach();
    }
    fn_ = fn;
    ctx_ = ctx;
    begin_ = begin;
    end_ = end;
    chunk_ = chunk;
    chunks_ = chunks;
    error_ = nullptr;
    pending_.store(static_cast<int>(workers_.size()));
    generation_.fetch_add(1);
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      wake_.notify_all();
    }
    t_in_pool = true;
    RunChunk(0);
    t_in_pool = false;
    // The workers' chunks are about as long as this one: spin, then yield.
    while (!SpinUntil([&] { return pending_.load(std::memory_order_acquire) == 0; })) std::this_thread::yield();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void RunChunk(int i) {
    const std::int64_t b = begin_ + i * chunk_;
    if (b >= end_) return;
    try {
      fn_(ctx_, b, std::min(end_, b + chunk_));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
  }

  // Worker `index` runs chunk index + 1 of every job that has one, and
  // acknowledges every job (the caller waits for all acknowledgements
  // before it reuses the job's fields).
  void Work(int index, std::uint64_t seen) {
    t_in_pool = true;
    for (;;) {
      if (!SpinUntil([&] { return generation_.load() != seen; })) {
        std::unique_lock<std::mutex> lock(sleep_mu_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        sleepers_.fetch_sub(1);
      }
      seen = generation_.load();
      if (index + 1 < chunks_) RunChunk(index + 1);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::mutex submit_mu_;  // one job at a time
  std::vector<std::thread> workers_;
  // The job (written by the caller before generation_ moves on, read by
  // the workers after they see it move).
  detail::RangeFn fn_ = nullptr;
  const void* ctx_ = nullptr;
  std::int64_t begin_ = 0, end_ = 0, chunk_ = 0;
  int chunks_ = 0;
  std::mutex error_mu_;
  std::exception_ptr error_;
  // Sequentially consistent: a worker going to sleep increments sleepers_
  // and then reads generation_; the caller moves generation_ and then reads
  // sleepers_, so one of them sees the other.
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::mutex sleep_mu_;
  std::condition_variable wake_;
};

Pool& ThePool() {
  static Pool* pool = new Pool();  // never destroyed: its threads live as long as the process
  return *pool;
}

}  // namespace

namespace detail {

void PoolParallelFor(std::int64_t begin, std::int64_t end, std::int64_t grain, std::int64_t threads, RangeFn fn,
                     const void* ctx) {
  if (begin >= end) return;
  const std::int64_t n = end - begin;
  if (n <= 1 || n <= grain || threads <= 1 || t_in_pool) {
    fn(ctx, begin, end);
    return;
  }
  const std::int64_t chunks = std::min(threads, grain > 0 ? (n + grain - 1) / grain : n);
  const std::int64_t chunk = (n + chunks - 1) / chunks;
  ThePool().Run(begin, end, chunk, static_cast<int>((n + chunk - 1) / chunk), fn, ctx);
}

}  // namespace detail
}  // namespace ropeserve::cpu
