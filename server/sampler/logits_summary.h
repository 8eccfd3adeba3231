// Each row of a step's logits summarized where the rows lie: its
// logsumexp, its max and the lowest id holding it (what the sampler needs
// of a greedy row, and the normalizer of every logprob it reports). On a
// CPU, float32 rows go through the kernels' row kernel
// (kernels/cpu/logits_summary.h: why a kernel, and its arithmetic); on a
// GPU through the CUDA twin (kernels/cuda/logits_summary.cu: one kernel
// for what LibTorch does in about ten); other dtypes and devices through
// LibTorch's max(1) and logsumexp(1).
#pragma once

#include <ATen/core/Tensor.h>

namespace ropeserve {

struct LogitsSummary {
  at::Tensor logsumexp;  // [R] float32
  at::Tensor max;        // [R] float32
  at::Tensor argmax;     // [R] int64
  // On a GPU: int32 [4R], the bits of (logsumexp, max, max) then the argmax
  // as int32, of which logsumexp and max are views: what a step of greedy
  // rows copies back, in one transfer (server/sampler/sampler.cc).
  // Undefined elsewhere.
  at::Tensor packed;
};

// logits [R, V], V >= 1, on any device.
LogitsSummary SummarizeLogits(const at::Tensor& logits);
// The same from LibTorch's max(1) and logsumexp(1): the path on other
// devices and dtypes, and the tests' comparison.
LogitsSummary SummarizeLogitsReference(const at::Tensor& logits);

}  // namespace ropeserve
