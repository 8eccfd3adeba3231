// Group-wise 4-bit weights (`--quantization int4`, and GPTQ / AWQ /
// compressed-tensors checkpoints, server/models/int4_checkpoint_loader.h):
// y = x @ W^T + b with W[n, k] = (q[n, k] - zero[n, g]) * scale[n, g],
// g = k / group_size, q in [0, 15], zero in [0, 16] (GPTQ's v1 layout
// stores zero points minus one, so reads back 1..16). With a column
// permutation (act-order checkpoints, whose groups are not runs of
// columns) the kernel's column k is the checkpoint's column perm[k]: x's
// columns are gathered by it first.
//
// Why: batch-1 decode reads every weight once per step and is bound by
// memory bandwidth (~30 GB/s on one thread here); 4 bits are half the
// bytes of int8, and 4-bit formats are what CPU users run (llama.cpp's
// Q4_0 / Q4_K_M). No Debian package has a 4-bit GEMM for LibTorch's CPU
// tensors, so the kernel is ours.
//
// Format in memory (Int4Weight): rows padded to Kp = K rounded up to 64;
// each 64-column block of a row is 32 bytes, byte j holding column j in its
// low nibble and column j + 32 in its high nibble (so one 32-byte load
// unpacks into two runs of 32 consecutive columns, no shuffles). Per group
// of `group_size` columns (32, 64 or 128; K a multiple of it) a float32
// scale and a zero point (8 for symmetric weights); the same scales as
// float16 too when each one is exactly a float16, which the matrix-vector
// kernel reads instead (3 bytes a group instead of 5: at batch 1 the bytes
// read are the time; the float32 copy serves the panel path and the
// dequantization). GPTQ and AWQ store float16 scales; QuantizeInt4 rounds
// its scales up to float16 values. Checkpoint formats (GPTQ, AWQ,
// compressed-tensors) are repacked into this at load.
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
// path, also the oracle's weights in tests). DequantizeInt4, Int4Rows and
// that generic path are LibTorch ops on any device: a CUDA worker keeps
// these tensors on the GPU and runs them past its own kernel's 16 rows
// (kernels/cuda/int4_linear.cu).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ropeserve::cpu {

struct Int4Weight {
  at::Tensor packed;   // [N, Kp / 2] uint8, the layout above
  at::Tensor scale;    // [N, K / group_size] float32
  at::Tensor scale16;  // the same values as float16 when each is one exactly, else undefined
  at::Tensor zero;     // [N, K / group_size] uint8 in [0, 15]
  std::int64_t k = 0;  // K (columns before padding)
  std::int64_t group_size = 128;
  at::Tensor perm;  // [K] int64, or undefined for the identity
};

// The largest group size the kernel takes (128, 64, 32) that divides
// `columns`; 0 when none does.
inline std::int64_t Int4KernelGroup(std::int64_t columns) {
  return columns % 128 == 0 ? 128 : columns % 64 == 0 ? 64 : columns % 32 == 0 ? 32 : 0;
}

// Round-to-nearest per group of w [N, K] (any floating dtype): asymmetric
// over a range that includes 0 (lo = min(min w, 0), hi = max(max w, 0),
// scale = (hi - lo) / 15, zero = round(-lo / scale)), or symmetric (zero 8,
// scale = max|w| / 7, levels -7..7). The scales are first rounded up to
// float16 values when all of them are 0 or normal float16 numbers (up, so
// that the 16 levels still span the group's range). Either way each weight
// is off by at most half its group's scale. TORCH_CHECK fails when K is not a multiple
// of group_size or group_size is not 32, 64 or 128.
Int4Weight QuantizeInt4(const at::Tensor& w, std::int64_t group_size, bool symmetric = false);
// From unpacked levels q [N, K] (uint8 or any integer type, values 0-15),
// scales and zeros [N, K / group_size] (zeros 0-16), in the kernel's column
// order, and the permutation `perm` ([K] int64 or undefined) that order is
// of the checkpoint's columns: how a checkpoint's 4-bit weights are brought
// into the kernel's layout. scale16 is set when every scale is exactly a
// float16.
Int4Weight PackInt4(const at::Tensor& q, const at::Tensor& scale, const at::Tensor& zero, std::int64_t group_size,
                    const at::Tensor& perm = {});
// w's tensors on `device` (made on the host, served there: a CUDA worker's
// weights). scale16 stays behind off the CPU: only the CPU's matrix-vector
// kernel reads it.
Int4Weight Int4WeightOn(Int4Weight w, const at::Device& device);
// The levels q [N, K] uint8 in the kernel's column order (tests, and repacking).
at::Tensor UnpackInt4(const Int4Weight& w);
// (q - zero) * scale as [N, K] of `dtype`, in the checkpoint's column order.
at::Tensor DequantizeInt4(const Int4Weight& w, at::ScalarType dtype);
// Rows `ids` [T] int64 of the dequantized matrix, as `dtype` (a tied
// embedding stored once, in a 4-bit LM head: --quantization int4-all).
at::Tensor Int4Rows(const Int4Weight& w, const at::Tensor& ids, at::ScalarType dtype);

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
