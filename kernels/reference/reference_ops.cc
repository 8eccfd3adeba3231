#include "kernels/reference/reference_ops.h"

#include <ATen/ATen.h>

namespace ropeserve::reference {

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const auto dtype = x.scalar_type();
  at::Tensor h = x.to(at::kFloat);
  at::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * at::rsqrt(variance + eps);
  return weight * h.to(dtype);
}

std::pair<at::Tensor, at::Tensor> RopeCosSin(const at::Tensor& inv_freq, const at::Tensor& positions,
                                             double attention_factor, at::ScalarType dtype) {
  // HF: freqs = inv_freq[None, :, None].float() @ position_ids[:, None, :].float()
  at::Tensor freqs = at::outer(positions.to(at::kFloat), inv_freq.to(at::kFloat));  // [T, rd/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);                                     // [T, rd]
  at::Tensor cos = emb.cos() * attention_factor;
  at::Tensor sin = emb.sin() * attention_factor;
  return {cos.to(dtype), sin.to(dtype)};
}

namespace {
at::Tensor RotateHalf(const at::Tensor& x) {
  const std::int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half);
  at::Tensor x2 = x.narrow(-1, half, half);
  return at::cat({-x2, x1}, -1);
}
}  // namespace

at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t rd = cos.size(-1);
  at::Tensor c = cos.unsqueeze(1);  // [T, 1, rd]: broadcast over heads
  at::Tensor s = sin.unsqueeze(1);
  if (rd == x.size(-1)) return x * c + RotateHalf(x) * s;
  at::Tensor rot = x.narrow(-1, 0, rd);
  at::Tensor pass = x.narrow(-1, rd, x.size(-1) - rd);
  return at::cat({rot * c + RotateHalf(rot) * s, pass}, -1);
}

c10::ScalarType SoftmaxDType(const at::Tensor& scores) {
  return scores.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

at::Tensor CausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  const std::int64_t T = q.size(0), hq = q.size(1), hkv = k.size(1);
  const std::int64_t groups = hq / hkv;
  // repeat_kv: [T, Hkv, D] -> [T, Hq, D] with each kv head repeated `groups` times.
  at::Tensor kr = k.repeat_interleave(groups, /*dim=*/1);
  at::Tensor vr = v.repeat_interleave(groups, /*dim=*/1);
  at::Tensor qh = q.transpose(0, 1);   // [Hq, T, D]
  at::Tensor kh = kr.transpose(0, 1);  // [Hq, T, D]
  at::Tensor vh = vr.transpose(0, 1);
  at::Tensor scores = at::matmul(qh, kh.transpose(1, 2)) * scale;  // [Hq, T, T]
  at::Tensor mask = at::ones({T, T}, q.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  at::Tensor probs = at::softmax(scores, -1, SoftmaxDType(q)).to(q.scalar_type());
  return at::matmul(probs, vh).transpose(0, 1).contiguous();  // [T, Hq, D]
}

// Grouped-query attention of T new queries over a cache holding S keys, the
// last T of which belong to the queries (positions S-T .. S-1). K/V heads are
// shared by reshaping q, not by copying K/V as the reference does.
// q: [T, Hq, D]; k, v: [S, Hkv, D] -> [T, Hq, D].
at::Tensor PrefixCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  const std::int64_t T = q.size(0), hq = q.size(1), D = q.size(2);
  const std::int64_t S = k.size(0), hkv = k.size(1), G = hq / hkv;
  at::Tensor qg = q.view({T, hkv, G, D}).permute({1, 2, 0, 3}).reshape({hkv, G * T, D});
  at::Tensor kh = k.permute({1, 2, 0});  // [Hkv, D, S]
  at::Tensor vh = v.permute({1, 0, 2});  // [Hkv, S, D]
  at::Tensor scores = at::bmm(qg, kh).mul_(scale).view({hkv, G, T, S});
  if (T > 1) {
    // Query t sits at position S-T+t and sees keys 0..S-T+t.
    at::Tensor qpos = at::arange(S - T, S, q.options().dtype(at::kLong)).unsqueeze(1);  // [T, 1]
    at::Tensor kpos = at::arange(0, S, q.options().dtype(at::kLong)).unsqueeze(0);      // [1, S]
    scores.masked_fill_(kpos > qpos, -std::numeric_limits<float>::infinity());
  }
  at::Tensor probs = at::softmax(scores, -1, SoftmaxDType(q)).to(q.scalar_type()).view({hkv, G * T, S});
  at::Tensor out = at::bmm(probs, vh);  // [Hkv, G*T, D]
  return out.view({hkv, G, T, D}).permute({2, 0, 1, 3}).reshape({T, hq, D});
}

at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                          const std::vector<std::vector<std::int32_t>>& block_tables,
                          const std::vector<std::int64_t>& query_lens, const std::vector<std::int64_t>& context_lens,
                          double scale) {
  const std::int64_t block_size = k_cache.size(1), hkv = k_cache.size(2), D = k_cache.size(3);
  std::vector<at::Tensor> outs;
  std::int64_t row = 0;
  for (size_t s = 0; s < block_tables.size(); ++s) {
    const std::int64_t L = context_lens[s], n_blocks = (L + block_size - 1) / block_size;
    at::Tensor table =
        at::tensor(std::vector<std::int64_t>(block_tables[s].begin(), block_tables[s].begin() + n_blocks), at::kLong);
    at::Tensor k = k_cache.index_select(0, table).reshape({-1, hkv, D}).narrow(0, 0, L);
    at::Tensor v = v_cache.index_select(0, table).reshape({-1, hkv, D}).narrow(0, 0, L);
    outs.push_back(PrefixCausalAttention(q.narrow(0, row, query_lens[s]), k, v, scale));
    row += query_lens[s];
  }
  return at::cat(outs, 0);
}

void WriteKvCache(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
                  const at::Tensor& slot_mapping) {
  const std::int64_t hkv = k_cache.size(2), D = k_cache.size(3);
  const at::Tensor keep = slot_mapping.ge(0);  // slot -1: a padding row, not written
  const at::Tensor slots = slot_mapping.masked_select(keep);
  k_cache.view({-1, hkv, D}).index_copy_(0, slots, k.index_select(0, keep.nonzero().view(-1)));
  v_cache.view({-1, hkv, D}).index_copy_(0, slots, v.index_select(0, keep.nonzero().view(-1)));
}

}  // namespace ropeserve::reference
