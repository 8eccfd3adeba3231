// The CPU's linears over group-wise 4-bit weights (`--quantization int4`,
// and GPTQ / AWQ / compressed-tensors checkpoints): y = x @ W^T + b with
// W[n, k] = (q[n, k] - zero[n, g]) * scale[n, g] (kernels/int4_weight.h).
//
// Why: batch-1 decode reads every weight once per step and is bound by
// memory bandwidth (~30 GB/s on one thread here); 4 bits are half the
// bytes of int8, and 4-bit formats are what CPU users run (llama.cpp's
// Q4_0 / Q4_K_M). No Debian package has a 4-bit GEMM for LibTorch's CPU
// tensors, so the kernel is ours.
//
// The format (Int4Weight, its quantization, packing and dequantization)
// is device-neutral: kernels/int4_weight.h.
//
// How (AVX-512-VNNI, up to kInt4KernelMaxRows rows of x): x rows quantized
// to int16 as the int8 kernel does (kernels/cpu/int8_linear.h: half a
// level of max|x_row| / 16383 per element); nibbles widened to int16 and
// their group's zero subtracted; vpdpwssd sums exactly in int32 per group
// (at most 128 products of |x| <= 16383, |q - z| <= 16: < 2^28), then one
// float32 multiply-add by the group's scale. On AVX2 (and AVX-512 without
// VNNI; the kernel table's int4_int8_x) the second form: x quantized per
// group of the weights' columns to int8 levels (scale max|x| / 127 per
// group, as llama.cpp's Q8_0 activations with the weights' groups as
// blocks: half a level, at most 1/254 of the group's largest |x|, per
// element), the nibbles unsigned bytes, vpmaddubsw (32 products an
// instruction, vpmaddwd's 16) and the zero point taken off each group's
// integer sum as zero * sum(levels); then one multiply-add by the product
// of the two group scales. More rows of bfloat16 x on a
// CPU with avx512_bf16: the panel path (Int4PanelLinear below). Otherwise
// the weights are dequantized to x's dtype for at::linear (the generic
// path, Int4DequantizedLinear, also the oracle's weights in tests).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "kernels/int4_weight.h"

namespace ropeserve::cpu {

// The most rows of x the kernel takes in one call. Int4Linear runs it up
// to the active ISA's crossover (CpuKernels::int4_kernel_max_rows,
// kernels/cpu/kernel_table.h): with VNNI 48 (the panel path's per-call
// dequantization of every panel costs more below: 48 matrices 4864 x 896,
// bf16 x, 2 threads: 1.66x at 16 rows, 1.72x at 32, 1.22x at 48), on AVX2
// every count (docs/benchmarks.md).
constexpr std::int64_t kInt4KernelMaxRows = 1 << 16;
// Whether the kernel can run on x [M, K]: float32 or bfloat16 x,
// 1 <= M <= kInt4KernelMaxRows, the weight's K.
bool Int4KernelSupports(const at::Tensor& x, const Int4Weight& w);
// The kernel alone (tests and benchmarks); requires Int4KernelSupports.
// x in the kernel's column order (already gathered by w.perm).
at::Tensor Int4LinearKernel(const at::Tensor& x, const Int4Weight& w, const at::Tensor& bias);
// More rows (prefill, batched decode past 48 sequences) with bfloat16 x,
// where the ISA's crossover sends them: the packed GEMM (kernels/cpu/packed_linear.h)
// over panels dequantized as it goes, each weight (q - zero) * scale
// rounded to bfloat16 (as the generic path's dequantized weights are for
// bfloat16 x); K a multiple of 32.
bool Int4PanelSupports(const at::Tensor& x, const Int4Weight& w);
// The panel path alone (tests and benchmarks); x in the kernel's column
// order. Requires Int4PanelSupports.
at::Tensor Int4PanelLinear(const at::Tensor& x, const Int4Weight& w, const at::Tensor& bias);
// y [M, N] in x's dtype; bias [N] or undefined. The kernel up to the ISA's
// crossover (and past it where the panel path cannot take x), else the
// panel path, else dequantize + at::linear.
at::Tensor Int4Linear(const at::Tensor& x, const Int4Weight& w, const at::Tensor& bias);

}  // namespace ropeserve::cpu
