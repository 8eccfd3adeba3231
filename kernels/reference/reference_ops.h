// Plain LibTorch reference ops, written to mirror Hugging Face's eager
// modeling code line by line. They are the oracle for every fast kernel
// (kernels/cpu, kernels/cuda) and the building blocks of the models'
// reference path. Slow on purpose: no fusion, no caching, no in-place tricks.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

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

// Causal attention of T queries that are the last T of S cached keys
// (positions S-T .. S-1); GQA by grouping queries, not copying K/V.
// q: [T, Hq, D]; k, v: [S, Hkv, D] -> [T, Hq, D].
at::Tensor PrefixCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale);

// Attention over a paged KV cache for a packed batch: sequence s owns
// query rows [sum(query_lens[<s]), +query_lens[s]), which are its last
// query_lens[s] tokens of context_lens[s]; its keys live in the blocks of
// block_tables[s]. q: [T, Hq, D]; k_cache, v_cache: [num_blocks,
// block_size, Hkv, D] -> [T, Hq, D]. Gathers each sequence's keys, then
// PrefixCausalAttention.
at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                          const std::vector<std::vector<std::int32_t>>& block_tables,
                          const std::vector<std::int64_t>& query_lens, const std::vector<std::int64_t>& context_lens,
                          double scale);

// k_cache.view(-1, Hkv, D)[slot_mapping[i]] = k[i] (and v). k, v: [T, Hkv, D];
// slot_mapping: [T] int64 = block * block_size + offset, or -1 (a padding row: skipped).
void WriteKvCache(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
                  const at::Tensor& slot_mapping);

}  // namespace ropeserve::reference
