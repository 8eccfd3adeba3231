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
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

std::int64_t SpinMicros() { return GetKernelConfig().pool_spin_us; }

// Spins (yielding the core every few microseconds, so that a runnable
// thread gets it) until done() or the spin time is over; true if done.
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

// A job's chunks are claimed from one 64-bit ticket: the job's generation
// (32 bits), the next chunk (16) and the number of chunks (16). A claim is
// a compare-and-swap that succeeds only while the generation is the one
// the claimer saw, so a worker that wakes late, after its job has ended,
// claims nothing and never touches the job's fields; and nobody waits for
// a thread that took no chunk. (Chunks are at most kMaxChunks.)
constexpr std::uint64_t kMaxChunks = 0xffff;
inline std::uint64_t Ticket(std::uint64_t gen, std::uint64_t next, std::uint64_t count) {
  return gen << 32 | next << 16 | count;
}
inline std::uint64_t Gen(std::uint64_t t) { return t >> 32; }
inline std::uint64_t Next(std::uint64_t t) { return (t >> 16) & 0xffff; }
inline std::uint64_t Count(std::uint64_t t) { return t & 0xffff; }

class Pool {
 public:
  void Run(std::int64_t begin, std::int64_t end, std::int64_t chunk, int chunks, int workers, detail::RangeFn fn,
           const void* ctx) {
    std::lock_guard<std::mutex> submit(submit_mu_);
    while (static_cast<int>(threads_.size()) < workers) {
      const int index = static_cast<int>(threads_.size());
      threads_.emplace_back([this, index, seen = Gen(ticket_.load())] { Work(index, seen); });
      threads_.back().detach();
    }
    // The job's fields, published by the ticket's release store below.
    fn_ = fn;
    ctx_ = ctx;
    begin_ = begin;
    end_ = end;
    chunk_ = chunk;
    error_ = nullptr;
    done_.store(0);
    participants_.store(workers, std::memory_order_relaxed);
    const std::uint64_t gen = Gen(ticket_.load()) + 1;
    ticket_.store(Ticket(gen, 0, static_cast<std::uint64_t>(chunks)));
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      wake_.notify_all();
    }
    t_in_pool = true;
    RunChunks(gen);
    t_in_pool = false;
    // The chunks others claimed: spin while they are about as long as this
    // thread's were, then sleep (a worker that lost its core mid-chunk
    // gets it back sooner when this thread is not spinning beside it).
    auto all_done = [&] { return done_.load() == chunks; };
    if (!SpinUntil(all_done)) {
      std::unique_lock<std::mutex> lock(done_mu_);
      caller_sleeping_.store(true);
      done_cv_.wait(lock, all_done);
      caller_sleeping_.store(false);
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Claims and runs chunks of job `gen` until none is left.
  void RunChunks(std::uint64_t gen) {
    for (;;) {
      std::uint64_t t = ticket_.load(std::memory_order_acquire);
      do {
        if (Gen(t) != gen || Next(t) >= Count(t)) return;
      } while (!ticket_.compare_exchange_weak(t, t + (std::uint64_t{1} << 16), std::memory_order_acq_rel));
      const std::int64_t b = begin_ + static_cast<std::int64_t>(Next(t)) * chunk_;
      if (b < end_) {
        try {
          fn_(ctx_, b, std::min(end_, b + chunk_));
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mu_);
          if (!error_) error_ = std::current_exception();
        }
      }
      if (done_.fetch_add(1) + 1 == static_cast<int>(Count(t)) && caller_sleeping_.load()) {
        std::lock_guard<std::mutex> lock(done_mu_);
        done_cv_.notify_one();
      }
    }
  }

  // Worker `index` helps with every job that wants at least index + 1
  // workers; between jobs it spins for the configured time, then sleeps.
  void Work(int index, std::uint64_t seen) {
    t_in_pool = true;
    for (;;) {
      auto moved = [&] { return Gen(ticket_.load()) != seen; };
      if (!SpinUntil(moved)) {
        std::unique_lock<std::mutex> lock(sleep_mu_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, moved);
        sleepers_.fetch_sub(1);
      }
      seen = Gen(ticket_.load());
      if (index < participants_.load(std::memory_order_relaxed)) RunChunks(seen);
    }
  }

  std::mutex submit_mu_;  // one job at a time
  std::vector<std::thread> threads_;
  std::atomic<std::uint64_t> ticket_{0};
  // The job: written by the caller before the ticket's store, read by a
  // thread only after it claimed one of the job's chunks (the job cannot
  // end, nor the next begin, before that chunk is done).
  detail::RangeFn fn_ = nullptr;
  const void* ctx_ = nullptr;
  std::int64_t begin_ = 0, end_ = 0, chunk_ = 0;
  std::atomic<int> participants_{0};  // workers the job wants (a hint; relaxed)
  std::atomic<int> done_{0};          // the job's chunks finished
  std::mutex error_mu_;
  std::exception_ptr error_;
  // Sequentially consistent pairs: a sleeper increments sleepers_ (the
  // caller: sets caller_sleeping_) and then reads the condition; the other
  // side changes the condition and then reads the flag, so one of them
  // sees the other.
  std::atomic<int> sleepers_{0};
  std::mutex sleep_mu_;
  std::condition_variable wake_;
  std::atomic<bool> caller_sleeping_{false};
  std::mutex done_mu_;
  std::condition_variable done_cv_;
};

Pool& ThePool() {
  static Pool* pool = new Pool();  // never destroyed: its threads live as long as the process
  return *pool;
}

}  // namespace

namespace {
std::atomic<int>& Threads() {
  static std::atomic<int> threads{static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
  return threads;
}
}  // namespace

void SetPoolThreads(int n) { Threads().store(std::max(1, n)); }
int PoolThreads() { return Threads().load(std::memory_order_relaxed); }

namespace detail {

std::int64_t PoolChunks(std::int64_t n, std::int64_t grain, std::int64_t threads) {
  if (n <= 1 || n <= grain || threads <= 1) return 1;
  const std::int64_t by_grain = grain > 0 ? (n + grain - 1) / grain : n;
  return std::min({by_grain, threads * kChunksPerThread, static_cast<std::int64_t>(kMaxChunks)});
}

void PoolParallelFor(std::int64_t begin, std::int64_t end, std::int64_t grain, std::int64_t threads, RangeFn fn,
                     const void* ctx) {
  if (begin >= end) return;
  const std::int64_t n = end - begin, chunks = t_in_pool ? 1 : PoolChunks(n, grain, threads);
  if (chunks <= 1) {
    fn(ctx, begin, end);
    return;
  }
  const std::int64_t chunk = (n + chunks - 1) / chunks;
  ThePool().Run(begin, end, chunk, static_cast<int>((n + chunk - 1) / chunk), static_cast<int>(threads - 1), fn, ctx);
}

}  // namespace detail
}  // namespace ropeserve::cpu
