// The kernels' thread pool keeps at::parallel_for's contract (every index
// once, in the chunks thread_pool.h promises; exceptions back to the
// caller, nested calls inline, concurrent callers served one after
// another), and a thread that loses its core does not stall the others.
#include "kernels/cpu/thread_pool.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace ropeserve {
namespace {

using Chunks = std::vector<std::pair<std::int64_t, std::int64_t>>;

template <typename For>
Chunks Record(For&& parallel_for, std::int64_t begin, std::int64_t end, std::int64_t grain) {
  std::mutex mu;
  Chunks got;
  parallel_for(begin, end, grain, [&](std::int64_t b, std::int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    got.emplace_back(b, e);
  });
  std::sort(got.begin(), got.end());
  return got;
}

class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(cpu::PoolThreads()) { cpu::SetPoolThreads(n); }
  ~ThreadCount() { cpu::SetPoolThreads(saved_); }

 private:
  int saved_;
};

TEST(ThreadPool, ChunksAreThoseThePoolPromises) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadCount tc(threads);
    for (const auto& [begin, end, grain] :
         std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{{0, 1, 1},
                                                                           {0, 2, 1},
                                                                           {0, 5, 1},
                                                                           {3, 17, 2},
                                                                           {0, 100, 7},
                                                                           {0, 100, 100},
                                                                           {0, 101, 100},
                                                                           {-5, 5, 1},
                                                                           {0, 1000, 16},
                                                                           {7, 7, 1},
                                                                           {0, 4, 0}}) {
      // thread_pool.h: t chunks of c = ceil(n / t) indices, the last shorter.
      Chunks want;
      const std::int64_t n = end - begin;
      if (n > 0) {
        const std::int64_t t = cpu::detail::PoolChunks(n, grain, threads), c = (n + t - 1) / t;
        for (std::int64_t b = begin; b < end; b += c) want.emplace_back(b, std::min(end, b + c));
      }
      const Chunks got = Record([](auto... a) { cpu::ParallelFor(a...); }, begin, end, grain);
      EXPECT_EQ(got, want) << "threads " << threads << " range [" << begin << ", " << end << ") grain " << grain;
      std::int64_t covered = 0;
      for (const auto& [b, e] : got) covered += e - b;
      EXPECT_EQ(covered, std::max<std::int64_t>(0, end - begin));
      // As at::parallel_for: one chunk (on the caller) when n <= grain or one thread.
      if (n > 0 && (n <= grain || threads == 1)) {
        EXPECT_EQ(got.size(), 1u);
      }
    }
  }
  EXPECT_EQ(cpu::detail::PoolChunks(1000, 1, 2), 2 * cpu::detail::kChunksPerThread);
  EXPECT_EQ(cpu::detail::PoolChunks(1000, 300, 8), 4);
}

// A worker that is not running (here: blocked inside its chunk) holds up
// only its own chunk: the caller claims every other one.
TEST(ThreadPool, ARunningThreadTakesTheChunksOfOneThatIsNot) {
  ThreadCount tc(2);
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> by_caller{0}, by_worker{0};
    std::atomic<bool> release{false};
    const auto caller = std::this_thread::get_id();
    cpu::ParallelFor(0, 8, 1, [&](std::int64_t, std::int64_t) {
      if (std::this_thread::get_id() == caller) {
        ++by_caller;
        // Once every chunk but the worker's first has been claimed here, let
        // the worker finish.
        if (by_caller.load() + by_worker.load() >= 8) release = true;
        return;
      }
      ++by_worker;
      // A worker that lost its core (bounded: should it claim the last
      // chunk after the caller's last check, nobody would release it).
      for (int i = 0; i < 2000 && !release.load(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
    });
    EXPECT_EQ(by_caller.load() + by_worker.load(), 8);
    // The worker stalls in its first chunk, so it claims at most one.
    EXPECT_GE(by_caller.load(), 7) << "the caller waited for a stalled worker instead of working";
    release = true;
  }
}

TEST(ThreadPool, ManyJobsInARowEachIndexOnce) {
  ThreadCount tc(2);
  std::vector<std::atomic<int>> hits(257);
  for (int job = 0; job < 2000; ++job) {
    const std::int64_t n = 1 + job % 257;
    cpu::ParallelFor(0, n, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
    });
  }
  for (std::size_t i = 0; i < hits.size(); ++i) {
    int want = 0;
    for (int job = 0; job < 2000; ++job) want += static_cast<std::int64_t>(i) < 1 + job % 257;
    EXPECT_EQ(hits[i].load(), want) << i;
  }
}

TEST(ThreadPool, WorkersAddedAfterEarlierJobsWaitForTheNextOne) {
  // The pool grows when a caller asks for more threads than it has; a new
  // worker must not take a job that already went by.
  for (int threads : {2, 3, 4, 6}) {
    ThreadCount tc(threads);
    for (int job = 0; job < 200; ++job) {
      std::vector<std::atomic<int>> hits(37);
      cpu::ParallelFor(0, 37, 1, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
      });
      for (const auto& h : hits) ASSERT_EQ(h.load(), 1) << "threads " << threads << " job " << job;
    }
  }
}

TEST(ThreadPool, ExceptionReachesTheCallerAndThePoolGoesOn) {
  ThreadCount tc(2);
  for (std::int64_t thrower : {0, 99}) {  // the caller's chunk, a worker's chunk
    std::atomic<std::int64_t> done{0};
    EXPECT_THROW(cpu::ParallelFor(0, 100, 1,
                                  [&](std::int64_t b, std::int64_t e) {
                                    if (b <= thrower && thrower < e) throw std::runtime_error("boom");
                                    done += e - b;
                                  }),
                 std::runtime_error);
    // Every other chunk ran to its end.
    const std::int64_t c = (100 + cpu::detail::PoolChunks(100, 1, 2) - 1) / cpu::detail::PoolChunks(100, 1, 2);
    const std::int64_t b = thrower / c * c;
    EXPECT_EQ(done.load(), 100 - (std::min<std::int64_t>(100, b + c) - b));
  }
  std::atomic<std::int64_t> sum{0};
  cpu::ParallelFor(0, 100, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadCount tc(2);
  std::atomic<std::int64_t> sum{0};
  cpu::ParallelFor(0, 8, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      cpu::ParallelFor(0, 10, 1, [&](std::int64_t b2, std::int64_t e2) {
        for (std::int64_t j = b2; j < e2; ++j) sum += i * 10 + j;
      });
  });
  EXPECT_EQ(sum.load(), 79 * 80 / 2);
  // Inside an OpenMP region (at::parallel_for) too.
  sum = 0;
  at::parallel_for(0, 4, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      cpu::ParallelFor(0, 3, 1, [&](std::int64_t b2, std::int64_t e2) { sum += e2 - b2; });
  });
  EXPECT_EQ(sum.load(), 12);
}

TEST(ThreadPool, ConcurrentCallersTakeTurns) {
  ThreadCount tc(2);
  std::atomic<std::int64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int job = 0; job < 500; ++job)
        cpu::ParallelFor(0, 64, 1, [&](std::int64_t b, std::int64_t e) { total += e - b; });
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 4 * 500 * 64);
}

}  // namespace
}  // namespace ropeserve
