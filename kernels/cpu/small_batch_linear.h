// y = x @ w^T + b for a few rows of x (decode at small batch), bfloat16.
//
// Why: at batch 1 a linear layer is a matrix-vector product bound by the
// speed of reading the weights. LibTorch 1.13 sends it to oneDNN's GEMM,
// which reads bf16 weights at ~9 GB/s per core here while the memory
// delivers ~30; this kernel streams each weight row once for all rows of x
// with AVX-512-BF16 dot products (vdpbf16ps: exact bf16 products, float32
// accumulation). Chosen at run time: on CPUs without avx512_bf16, or for
// other dtypes and shapes, callers use at::linear (the oracle in tests).
#pragma once

#include <ATen/core/Tensor.h>

namespace ropeserve::cpu {

// The most rows the kernel takes (passes of 8 rows over blocks of weights).
constexpr int64_t kSmallBatchKernelMaxRows = 64;

// The most rows for which callers choose it over at::linear: 8 by default
// (measured: ahead of oneDNN up to 8 rows, level at 16 and 32, behind at
// 64; docs/benchmarks.md), or ROPESERVE_SMALL_BATCH_MAX_ROWS=N (0-64) for
// side-by-side comparisons.
int64_t SmallBatchMaxRows();

// True when SmallBatchLinear can run: CPU with avx512_bf16, bfloat16 x
// [M, K] with M <= kSmallBatchKernelMaxRows, w [N, K] contiguous, bias [N]
// or undefined.
bool SmallBatchLinearSupports(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);
// Supported and M <= SmallBatchMaxRows(): the kernel should be used.
bool SmallBatchLinearApplies(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);

// [M, N] bfloat16 (float32 accumulation, one rounding at the end).
at::Tensor SmallBatchLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);

}  // namespace ropeserve::cpu
