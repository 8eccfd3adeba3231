#include "server/serving/threads.h"

#include <ATen/Parallel.h>
#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "kernels/cpu/thread_pool.h"
#include "server/common/cpu_budget.h"

namespace ropeserve {

void SetComputeThreads(int n) {
  if (n <= 0) n = ReadCpuBudget().cpus;
  cpu::SetPoolThreads(n);
  // Every parallel hot path runs on the kernels' pool; LibTorch's OpenMP
  // teams would compete with it for the cores (and stall a whole region
  // on a thread that lost its core: a shared node's collapse).
  at::set_num_threads(1);
}

int ComputeThreads() { return cpu::PoolThreads(); }

void TuneAllocator() {
  for (const char* v : {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"})
    if (std::getenv(v) != nullptr) return;  // the operator chose
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  // glibc gives busy threads arenas of their own, up to 8 per core; each
  // keeps its high-water mark (nothing is trimmed below 512 MiB), so with
  // hundreds of connection threads resident memory creeps up for as long as
  // new peaks meet new arenas. One arena per core (at least 2) keeps it
  // flat (soak figures: docs/benchmarks.md). Per-thread caches still serve
  // small allocations without taking an arena's lock.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, std::max(2, ReadCpuBudget().cpus));
}

}  // namespace ropeserve
