// The rotary position embedding (RoPE) every model here uses: one table
// builder and one out-of-place rotation for both layouts, in ATen
// operations (any device: the CUDA decoder builds its table with it too).
// The decoders' serving path rotates q and k in place with the device's
// fused kernel (kernels/cpu/fused_ops.h, kernels/cuda: rotate-half) from
// the same table. Oracles: reference::RopeCosSin and reference::ApplyRope
// for the rotate-half layout (bitwise equal); the interleaved layout
// against the explicit formula in tests/models/rotary_test.cc.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

namespace ropeserve {

enum class RotaryLayout {
  // Channel i pairs with i + d/2: Llama, Qwen, ModernBERT (rotate_half).
  kRotateHalf,
  // Channel 2i pairs with 2i + 1: RoFormer.
  kInterleaved,
};

// cos and sin, each [T, 2 * F], for `positions` [T] (int64) and
// `inv_freq` [F]: angle = position * inv_freq multiplied in `angle_dtype`
// (float32 as Hugging Face's Llama and ModernBERT rotary modules do,
// float64 as RoFormer's numpy table), rounded to float32, cos and sin in
// float32, times `factor` (the attention factor of YaRN and LongRoPE; 1
// elsewhere), cast to `dtype`. Rotate-half lays the frequencies out as
// [f0 .. fF-1, f0 .. fF-1]; interleaved as [f0, f0, f1, f1, ...].
std::pair<at::Tensor, at::Tensor> RotaryTable(const at::Tensor& inv_freq, const at::Tensor& positions, double factor,
                                              RotaryLayout layout, at::ScalarType angle_dtype, at::ScalarType dtype);

// x * cos + rotate(x) * sin on the first R = cos.size(-1) channels of x's
// last dimension; the other channels pass through (partial rotary).
// rotate: [-x[R/2 ..], x[.. R/2]] (rotate-half) or [-x1, x0, -x3, x2, ...]
// (interleaved). cos and sin broadcast against x's leading dimensions.
at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, RotaryLayout layout);

}  // namespace ropeserve
