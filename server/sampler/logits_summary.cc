#include "server/sampler/logits_summary.h"

#include <ATen/ATen.h>

#include "kernels/cpu/logits_summary.h"
#ifdef ROPESERVE_HAVE_CUDA
#include "kernels/cuda/torch_glue.h"
#endif

namespace ropeserve {

LogitsSummary SummarizeLogitsReference(const at::Tensor& logits) {
  auto [max, argmax] = logits.max(1);
  return {at::logsumexp(logits, 1), max, argmax, {}};
}

LogitsSummary SummarizeLogits(const at::Tensor& logits) {
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) >= 1, "SummarizeLogits: logits must be [rows, vocab]");
#ifdef ROPESERVE_HAVE_CUDA
  if (logits.is_cuda() && logits.scalar_type() == at::kFloat) {
    auto [logsumexp, max, argmax, packed] = cuda::SummarizeRowsPacked(logits);
    return {logsumexp, max, argmax, packed};
  }
#endif
  if (!logits.is_cpu() || logits.scalar_type() != at::kFloat) return SummarizeLogitsReference(logits);
  const at::Tensor x = logits.contiguous();
  const std::int64_t rows = x.size(0);
  LogitsSummary out{at::empty({rows}, at::kFloat), at::empty({rows}, at::kFloat), at::empty({rows}, at::kLong), {}};
  cpu::SummarizeRows(x.data_ptr<float>(), rows, x.size(1), out.logsumexp.data_ptr<float>(), out.max.data_ptr<float>(),
                     out.argmax.data_ptr<std::int64_t>());
  return out;
}

}  // namespace ropeserve
