// ParallelFor's LibTorch side: OpenMP nesting (a call inside an OpenMP
// region runs inline). Kept apart from the pool so that the pool's
// ThreadSanitizer test runs no uninstrumented code.
#include <ATen/Parallel.h>

#include "kernels/cpu/thread_pool.h"

namespace ropeserve::cpu {

namespace detail {

void ParallelForImpl(std::int64_t begin, std::int64_t end, std::int64_t grain, RangeFn fn, const void* ctx) {
  const std::int64_t threads = at::in_parallel_region() ? 1 : PoolThreads();
  PoolParallelFor(begin, end, grain, threads, fn, ctx);
}

}  // namespace detail
}  // namespace ropeserve::cpu
