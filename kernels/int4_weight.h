// The group-wise 4-bit weight format (`--quantization int4`, and GPTQ /
// AWQ / compressed-tensors checkpoints, server/models/int4_checkpoint_loader.h)
// and its LibTorch functions, on any device: the CPU's kernels
// (kernels/cpu/int4_linear.h) and the CUDA worker's (kernels/cuda/kernels.h's
// Int4Linear, through server/models/cuda_decoder_ops.cc) read the same
// tensors, so the format lives beside both rather than inside one.
//
// W[n, k] = (q[n, k] - zero[n, g]) * scale[n, g], g = k / group_size, q in
// [0, 15], zero in [0, 16] (GPTQ's v1 layout stores zero points minus one,
// so reads back 1..16). With a column permutation (act-order checkpoints,
// whose groups are not runs of columns) the kernels' column k is the
// checkpoint's column perm[k]: x's columns are gathered by it first.
//
// In memory (Int4Weight): rows padded to Kp = K rounded up to 64; each
// 64-column block of a row is 32 bytes, byte j holding column j in its low
// nibble and column j + 32 in its high nibble (so one 32-byte load unpacks
// into two runs of 32 consecutive columns, no shuffles). Per group of
// `group_size` columns (32, 64 or 128; K a multiple of it) a float32 scale
// and a zero point (8 for symmetric weights); the same scales as float16
// too when each one is exactly a float16, which the CPU's matrix-vector
// kernel reads instead (3 bytes a group instead of 5: at batch 1 the bytes
// read are the time; the float32 copy serves the panel path, the CUDA
// kernel and the dequantization). GPTQ and AWQ store float16 scales;
// QuantizeInt4 rounds its scales up to float16 values. Checkpoint formats
// are repacked into this at load.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ropeserve {

struct Int4Weight {
  at::Tensor packed;   // [N, Kp / 2] uint8, the layout above
  at::Tensor scale;    // [N, K / group_size] float32
  at::Tensor scale16;  // the same values as float16 when each is one exactly, else undefined
  at::Tensor zero;     // [N, K / group_size] uint8 in [0, 15]
  std::int64_t k = 0;  // K (columns before padding)
  std::int64_t group_size = 128;
  at::Tensor perm;  // [K] int64, or undefined for the identity
};

// Kp: K rounded up to the 64-column blocks the rows are packed in.
inline std::int64_t Int4PaddedColumns(std::int64_t k) { return (k + 63) / 64 * 64; }

// The largest group size the format takes (128, 64, 32) that divides
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

// The same weights in the layout of the CUDA tensor-core kernel
// (kernels/cuda/int4_mma.cu, issue 57): each 32-bit word a thread loads is
// the B operand of one m16n8k16 step for two 8-column tiles, so the
// kernel loads 16 bytes a lane and turns nibbles into 16-bit operands with
// bit operations, no shuffles. Made once at load, on any device; N a
// multiple of 16.
//
// packed: uint8 [N / 16, Kp / 64, 32, 16]: 16 columns (tile ct), 64
// columns of K (chunk kc), lane l = 4 c + t (c = l / 4, t = l % 4), four
// words w = 2 wh + wl; nibble i = 4 e + 2 j + h of word w (bits 4i..4i+3,
// little-endian) holds the level of column n = 16 ct + 8 j + c at
// k = 64 kc + 32 wh + 8 t + 4 wl + 2 h + e. That is the mma's B fragment
// (b0 b1 at k = 2t, 2t + 1 of the step, b2 b3 at 2t + 8, 2t + 9, column c)
// for the step's k reordered: step w's sixteen k are 64 kc + 32 wh + 4 wl
// + {0..3} + 8 t', so lane t's x operand for two steps is eight
// consecutive x (one 16-byte load), and each step lies inside one 32-column
// half, so inside one group. Padding levels past K are 0.
// scale: float32 [G, N] and zero: uint8 [G, N] (transposed: a tile's
// columns adjacent).
struct Int4MmaWeight {
  at::Tensor packed;
  at::Tensor scale;
  at::Tensor zero;
  std::int64_t n = 0, k = 0;
  std::int64_t group_size = 128;
  at::Tensor perm;  // as Int4Weight's
};
// TORCH_CHECK fails when N is not a multiple of 16. On w's device.
Int4MmaWeight Int4MmaLayout(const Int4Weight& w);

// The generic path on any device: w dequantized to x's dtype, then
// at::linear (cuBLAS on CUDA). y [M, N] in x's dtype; bias [N] or undefined.
// What a CUDA worker runs past its 4-bit kernel's rows (prefill), and the
// CPU's Int4Linear where neither of its kernels takes x.
at::Tensor Int4DequantizedLinear(const at::Tensor& x, const Int4Weight& w, const at::Tensor& bias);

}  // namespace ropeserve
