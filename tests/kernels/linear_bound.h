// The oracle of the bf16-output linear kernels' tests (packed bf16 GEMM,
// int8 panels): y = x w^T + b in float64, and the error a kernel may have
// when its products are exact in float32, it adds `additions` float32 terms
// per output (each rounding by at most 2^-24 of a partial sum bounded by
// |x| |w|^T + |b|), and it rounds the result once to bfloat16 (half a unit,
// 2^-9 of |y|; 2^-8 allowed for the sums' error carried through).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "tests/common/float_bounds.h"

namespace ropeserve::testing {

struct LinearExpectation {
  at::Tensor exact, bound;  // float64 [M, N]
};

// x64 [M, K], w64 [N, K] float64; b [N] (any dtype) or undefined.
inline LinearExpectation ExactBf16Linear(const at::Tensor& x64, const at::Tensor& w64, const at::Tensor& b,
                                         std::int64_t additions) {
  at::Tensor exact = at::matmul(x64, w64.t());
  at::Tensor magnitude = at::matmul(x64.abs(), w64.abs().t());
  if (b.defined()) {
    exact = exact + b.to(at::kDouble);
    magnitude = magnitude + b.to(at::kDouble).abs();
  }
  const at::Tensor bound =
      static_cast<double>(additions) * kF32Roundoff * magnitude + kBF16Roundoff * exact.abs() + 1e-30;
  return {exact, bound};
}

}  // namespace ropeserve::testing
