#include "server/serving/threads.h"

#include <ATen/Parallel.h>
#include <malloc.h>

#include <cstdlib>

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
  // One arena, the main one. glibc gives busy threads arenas of their own,
  // up to 8 per core: with hundreds of connection threads resident memory
  // crept up for as long as new peaks met new arenas (soak figures:
  // docs/benchmarks.md). And an arena other than the main one keeps its
  // memory in mmap'd heaps of 64 MiB that it unmaps once they are free:
  // the engine thread's step tensors (tens of MB each at prefill) were
  // page-faulted in again on every step when that thread happened to get
  // such an arena, which the order threads first allocate in decides (16
  // prompts of 256 tokens prefilled at half speed, 15% of the time in page
  // faults; docs/benchmarks.md). Per-thread caches still serve small
  // allocations without taking the arena's lock.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 1);
}

}  // namespace ropeserve
