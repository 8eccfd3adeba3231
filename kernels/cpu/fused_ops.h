// Fused CPU kernels for the layer's elementwise work: RMSNorm (optionally
// with the residual add folded in), SiLU-and-multiply and rotate-half RoPE applied to q and k
// in place. One pass over memory each instead of the 4-6 LibTorch ops of
// the reference. bfloat16 norms and SiLU on AVX-512 (fused_ops_avx512.cc),
// the rest vectorised with at::vec, parallel over rows with
// at::parallel_for; float32 and bfloat16 (float32 accumulation). Oracles:
// reference::RmsNorm and reference::ApplyRope (kernels/reference).
#pragma once

#include <ATen/core/Tensor.h>

namespace ropeserve::cpu {

// weight * RMSNorm(x) over the last dimension, rounding like the reference
// (normalise in float32, cast to x's dtype, then multiply by weight).
// x: [..., n] contiguous; weight: [n] in x's dtype.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// residual += x (in residual's dtype, as `h = h + x` rounds), then returns
// RmsNorm(residual, weight, eps). x, residual: [T, n] contiguous, same dtype.
at::Tensor AddRmsNorm(const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps);

// silu(gate_up[:, :I]) * gate_up[:, I:] -> [T, I], rounding like the
// reference (at::silu in float32 rounded to the dtype, then the product):
// one pass over gate_up into one new tensor (bfloat16 on AVX-512), else
// the two LibTorch ops.
at::Tensor SiluAndMul(const at::Tensor& gate_up);

// x as float32 (the LM head's logits): bfloat16 widened on the kernels'
// pool (exact), float32 returned as is, other dtypes by x.to(kFloat). Why
// not x.to(kFloat) alone: on a 152k-entry row that is an OpenMP region on
// every decode step (kernels/cpu/logits_summary.h says what that costs).
at::Tensor ToFloat32(const at::Tensor& x);

// Rotate-half RoPE on the first rotary_dim channels of every head of q and
// k, in place. q: [T, Hq, D], k: [T, Hkv, D] contiguous; cos, sin:
// [T, rotary_dim] (already scaled by the attention factor), same dtype.
void ApplyRopeInplace(at::Tensor& q, at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace ropeserve::cpu
