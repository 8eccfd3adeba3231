#include "kernels/cpu/logits_summary.h"

#include <ATen/ATen.h>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/thread_pool.h"

namespace ropeserve::cpu {

LogitsSummary SummarizeLogitsReference(const at::Tensor& logits) {
  auto [max, argmax] = logits.max(1);
  return {at::logsumexp(logits, 1), max, argmax};
}

LogitsSummary SummarizeLogits(const at::Tensor& logits) {
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) >= 1, "SummarizeLogits: logits must be [rows, vocab]");
  if (!logits.is_cpu() || logits.scalar_type() != at::kFloat) return SummarizeLogitsReference(logits);
  const at::Tensor x = logits.contiguous();
  const std::int64_t rows = x.size(0), n = x.size(1);
  LogitsSummary out{at::empty({rows}, at::kFloat), at::empty({rows}, at::kFloat), at::empty({rows}, at::kLong)};
  const float* px = x.data_ptr<float>();
  float* lse = out.logsumexp.data_ptr<float>();
  float* mx = out.max.data_ptr<float>();
  std::int64_t* am = out.argmax.data_ptr<std::int64_t>();
  // A row a task: each row's result is the same whatever the thread count.
  const auto row_kernel = ActiveKernels().summarize_row;
  ParallelFor(0, rows, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) row_kernel(px + r * n, n, lse + r, mx + r, am + r);
  });
  return out;
}

}  // namespace ropeserve::cpu
