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
  at::Tensor emb = at::cat({freqs, freqs}, -1);                                    // [T, rd]
  at::Tensor cos = emb.cos() * attention_factor;
  at::Tensor sin = emb.sin() * attention_factor;
  return {cos.to(dtype), sin.to(dtype)};
}

namespace {
at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half);
  at::Tensor x2 = x.narrow(-1, half, half);
  return at::cat({-x2, x1}, -1);
}
}  // namespace

at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t rd = cos.size(-1);
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
  const int64_t T = q.size(0), hq = q.size(1), hkv = k.size(1);
  const int64_t groups = hq / hkv;
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

}  // namespace ropeserve::reference
