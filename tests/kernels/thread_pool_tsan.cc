// The kernels' thread pool under ThreadSanitizer (ctest thread_pool_tsan):
// the pool's own file and this driver are instrumented, and nothing else
// runs: the driver calls the torch-free PoolParallelFor with its own thread
// counts instead of going through LibTorch (whose uninstrumented internals
// TSan would report on). Concurrent callers with different thread counts,
// a pool that grows while jobs run, exceptions, workers that went to sleep.
// Exits 1 on a wrong count; TSan exits 66 on a race.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace {

template <typename F>
void PoolFor(std::int64_t begin, std::int64_t end, std::int64_t threads, const F& f) {
  ropeserve::cpu::detail::PoolParallelFor(
      begin, end, 1, threads,
      [](const void* ctx, std::int64_t b, std::int64_t e) { (*static_cast<const F*>(ctx))(b, e); }, &f);
}

}  // namespace

int main() {
  std::atomic<long> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t)
    callers.emplace_back([&, t] {
      for (int round = 0; round < 4; ++round) {
        const std::int64_t threads = 2 + (t + round) % 4;  // 2..5: the pool grows while others run jobs
        for (int job = 0; job < 300; ++job) {
          std::vector<std::atomic<int>> hits(37);
          PoolFor(0, 37, threads, [&](std::int64_t b, std::int64_t e) {
            for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
            // A nested call runs inline on the thread that makes it.
            PoolFor(0, 3, threads, [](std::int64_t, std::int64_t) {});
          });
          for (const auto& h : hits) wrong += h.load() != 1;
          if (job % 50 == 0) {
            try {
              PoolFor(0, 10, threads, [](std::int64_t b, std::int64_t) {
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
