#include "server/runner/threads.h"

#include <ATen/Parallel.h>

#include <malloc.h>

#include <cstdlib>
#include <thread>

namespace ropeserve {

void SetComputeThreads(int n) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(n);
}

int ComputeThreads() { return at::get_num_threads(); }

void TuneAllocator() {
  for (const char* v : {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"})
    if (std::getenv(v) != nullptr) return;  // the operator chose
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

}  // namespace ropeserve
