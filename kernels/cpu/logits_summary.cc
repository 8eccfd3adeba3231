#include "kernels/cpu/logits_summary.h"

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/thread_pool.h"

namespace ropeserve::cpu {

void SummarizeRows(const float* logits, std::int64_t rows, std::int64_t n, float* logsumexp, float* max,
                   std::int64_t* argmax) {
  const auto row_kernel = ActiveKernels().summarize_row;
  ParallelFor(0, rows, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) row_kernel(logits + r * n, n, logsumexp + r, max + r, argmax + r);
  });
}

}  // namespace ropeserve::cpu
