// Int8 weights (`--quantization int8`): y = x @ (q * scale)^T + b with
// per-output-channel symmetric int8 weights q [N, K] and float32 scales
// [N] (scale = max|w_row| / 127).
//
// Why: decode reads every weight once per step and is bound by memory
// bandwidth; int8 halves the bytes of bf16. No Debian package offers an
// int8 GEMM for LibTorch 1.13's CPU tensors (its quantized ops need the
// separate QEngine types and run per-tensor fbgemm kernels that do not
// take bf16 activations), so the kernel is ours.
//
// How: each row of x is quantized on the fly to int16 with its own scale
// (max|x_row| / 16383; each element is off by at most half that step,
// 2^-15 of the row's largest: below a bf16 rounding for the elements that
// dominate a dot product), and AVX-512-VNNI's
// vpdpwssd multiplies int16 x int16 pairs into int32 sums (exact), 32
// products per instruction; sums go to float32 every 8192 columns, so no
// int32 sum can overflow. One weight row streams once for up to 8 rows of x.
// Chosen at run time for up to Int8KernelMaxRows() rows on CPUs with
// avx512_vnni. More rows of bfloat16 x (batched decode, prefill) on CPUs
// with avx512_bf16 go to the panel kernel: packed_linear's GEMM over
// panels widened from int8 to bfloat16 as it goes (exact: |q| <= 127),
// sums times the scale; vpdpwssd runs at about half of vdpbf16ps's rate
// here, and the widening costs less than the difference once a panel
// serves a few tiles of 6 rows. Otherwise the weights are dequantized to
// x's dtype and go to at::linear. The oracle in tests: at::linear in
// float32 on the dequantized weights.
#pragma once

#include <ATen/core/Tensor.h>

namespace ropeserve::cpu {

// Each row of x is quantized to the integers in [-kInt8ActivationLevels, +kInt8ActivationLevels].
constexpr int kInt8ActivationLevels = 16383;

struct Int8Weight {
  at::Tensor q;      // [N, K] int8, contiguous, values in [-127, 127]
  at::Tensor scale;  // [N] float32
};

// Per-row symmetric quantization of w [N, K] (any floating dtype); an
// all-zero row gets scale 0.
Int8Weight QuantizeInt8(const at::Tensor& w);
// q * scale as [N, K] of `dtype`.
at::Tensor DequantizeInt8(const Int8Weight& w, at::ScalarType dtype);
// Rows `ids` [T] int64 of the dequantized matrix, as `dtype` (a tied
// embedding stored once, in int8).
at::Tensor Int8Rows(const Int8Weight& w, const at::Tensor& ids, at::ScalarType dtype);

// The most rows of x the VNNI kernel takes in one call.
constexpr std::int64_t kInt8KernelMaxRows = 1 << 16;
// The most rows for which Int8Linear uses the kernel rather than the panel
// kernel (or dequantize + at::linear): the kernel configuration's
// int8_vnni_max_rows (kernels/cpu/kernel_config.h), by default the active
// ISA's crossover (CpuKernels::int8_kernel_max_rows): 16 with VNNI
// (measured, 48 matrices 4864x896, 2 threads: the VNNI kernel 212 GFLOP/s
// at 16 rows against the panels' 183; at 32 rows 185 against 249), every
// row count on AVX2 (its kernel ~245 GFLOP/s from 16 to 512 rows, the
// float32 panels 86-186; docs/benchmarks.md).
std::int64_t Int8KernelMaxRows();
// Whether the kernel can run on x [M, K] (CPU with avx512_vnni, float32 or
// bfloat16, M <= kInt8KernelMaxRows).
bool Int8KernelSupports(const at::Tensor& x, const Int8Weight& w);

// Whether the panel kernel can run on x [M, K]: bfloat16 and a CPU with
// avx512_bf16 (otherwise Int8Linear dequantizes for at::linear, the
// generic path).
bool Int8PanelSupports(const at::Tensor& x, const Int8Weight& w);
// The panel kernel alone (tests and benchmarks); bfloat16 [M, N], float32
// sums, one rounding. Requires Int8PanelSupports.
at::Tensor Int8PanelLinear(const at::Tensor& x, const Int8Weight& w, const at::Tensor& bias);

// y [M, N] in x's dtype (float32 or bfloat16); bias [N] or undefined.
at::Tensor Int8Linear(const at::Tensor& x, const Int8Weight& w, const at::Tensor& bias);
// The kernel alone (tests and benchmarks); requires Int8KernelSupports.
at::Tensor Int8LinearKernel(const at::Tensor& x, const Int8Weight& w, const at::Tensor& bias);

}  // namespace ropeserve::cpu
