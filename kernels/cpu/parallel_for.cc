// ParallelFor's LibTorch side: the calling thread's compute-thread count,
// OpenMP nesting, and the OpenMP fallback (ROPESERVE_KERNEL_POOL=0). Kept
// apart from the pool so that the pool's ThreadSanitizer test runs no
// uninstrumented code.
#include <ATen/Parallel.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace ropeserve::cpu {

bool KernelPoolEnabled() {
  static const bool enabled = EnabledInEnv("ROPESERVE_KERNEL_POOL");
  return enabled;
}

namespace detail {

void ParallelForImpl(int64_t begin, int64_t end, int64_t grain, RangeFn fn, const void* ctx) {
  if (begin >= end) return;
  if (!KernelPoolEnabled()) {
    at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { fn(ctx, b, e); });
    return;
  }
  const int64_t threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  PoolParallelFor(begin, end, grain, threads, fn, ctx);
}

}  // namespace detail
}  // namespace ropeserve::cpu
