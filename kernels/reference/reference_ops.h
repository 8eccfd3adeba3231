// Plain LibTorch reference ops, written to mirror Hugging Face's eager
// modeling code line by line. They are the oracle for every fast kernel
// (kernels/cpu, kernels/cuda) and the building blocks of the models'
// reference path. Slow on purpose: no fusion, no caching, no in-place tricks.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

namespace ropeserve::reference {

// Hugging Face LlamaRMSNorm: normalise in float32, cast back, scale.
// x: [..., n], weight: [n] -> [..., n] in x's dtype.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// cos/sin tables for the given positions.
// inv_freq: [rotary_dim / 2] float32; positions: [T] int64.
// Returns {cos, sin}, each [T, rotary_dim] in `dtype`, already multiplied by
// attention_factor (as HF's rotary embedding does).
std::pair<at::Tensor, at::Tensor> RopeCosSin(const at::Tensor& inv_freq, const at::Tensor& positions,
                                             double attention_factor, at::ScalarType dtype);

// Rotate-half RoPE on the first rotary_dim channels of each head; the rest
// pass through (partial rotary).
// x: [T, heads, head_dim]; cos, sin: [T, rotary_dim] -> [T, heads, head_dim].
at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// The dtype attention softmax runs in: float32 as Hugging Face does for
// float32/16-bit inputs; float64 stays float64 (tests use it as exact maths).
c10::ScalarType SoftmaxDType(const at::Tensor& scores);

// Dense causal attention with GQA by repeating K/V heads (HF's repeat_kv),
// softmax in float32. q: [T, Hq, D], k, v: [T, Hkv, D] -> [T, Hq, D].
at::Tensor CausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale);

}  // namespace ropeserve::reference
