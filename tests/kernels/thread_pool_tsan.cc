// The kernels' thread pool under ThreadSanitizer (ctest thread_pool_tsan):
// the pool's own file and this driver are instrumented; LibTorch is not (it
// only answers the thread count). Concurrent callers with different thread
// counts, a pool that grows while jobs run, exceptions, workers that went
// to sleep. Exits 1 on a wrong count; TSan exits 66 on a race.
#include <ATen/Parallel.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.h"

int main() {
  using ropeserve::cpu::ParallelFor;
  std::atomic<long> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t)
    callers.emplace_back([&, t] {
      for (int round = 0; round < 4; ++round) {
        at::set_num_threads(2 + (t + round) % 4);  // 2..5: the pool grows while others run jobs
        for (int job = 0; job < 300; ++job) {
          std::vector<std::atomic<int>> hits(37);
          ParallelFor(0, 37, 1, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
          });
          for (const auto& h : hits) wrong += h.load() != 1;
          if (job % 50 == 0) {
            try {
              ParallelFor(0, 10, 1, [](int64_t b, int64_t) {
                if (b > 0) throw std::runtime_error("a worker's chunk");
              });
              ++wrong;  // the exception must reach the caller
            } catch (const std::runtime_error&) {
            }
          }
          if (job % 100 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // workers sleep
        }
      }
    });
  for (auto& c : callers) c.join();
  std::printf("thread pool under TSan: %ld wrong counts\n", wrong.load());
  return wrong.load() == 0 ? 0 : 1;
}
