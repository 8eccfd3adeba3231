#include "kernels/int4_weight.h"

#include <ATen/ATen.h>

namespace ropeserve {

namespace {

void CheckGroups(std::int64_t K, std::int64_t group_size) {
  TORCH_CHECK(group_size == 32 || group_size == 64 || group_size == 128, "int4: group size ", group_size,
              " (32, 64 or 128)");
  TORCH_CHECK(K >= group_size && K % group_size == 0, "int4: K = ", K, " is not a multiple of the group size ",
              group_size);
}

// Scales s >= 0 rounded up to float16 values, when every one is 0 or lies
// in float16's normal range (below it float16 keeps fewer significant
// bits than float32 would give those groups); else s unchanged.
at::Tensor ScalesUpToHalf(const at::Tensor& s) {
  constexpr double kMinNormal = 0x1p-14, kMaxBelowTop = 65504.0 / (1 + 0x1p-10);
  if (s.numel() == 0 || s.max().item<double>() > kMaxBelowTop ||
      at::logical_and(s > 0, s < kMinNormal).any().item<bool>())
    return s;
  const at::Tensor h = s.to(at::kHalf);
  // The next float16 up from a positive finite one: its bits plus one.
  const at::Tensor up = (h.view(at::kShort) + 1).view(at::kHalf);
  return at::where(h.to(at::kFloat) < s, up, h).to(at::kFloat);
}

}  // namespace

Int4Weight QuantizeInt4(const at::Tensor& w_in, std::int64_t group_size, bool symmetric) {
  TORCH_CHECK(w_in.dim() == 2 && w_in.is_floating_point(), "QuantizeInt4: a floating [N, K] matrix");
  const std::int64_t N = w_in.size(0), K = w_in.size(1);
  CheckGroups(K, group_size);
  const at::Tensor w = w_in.to(at::kFloat).reshape({N, K / group_size, group_size});
  at::Tensor scale, zero;
  if (symmetric) {
    scale = ScalesUpToHalf(w.abs().amax(2) / 7.0);
    zero = at::full_like(scale, 8.0);
  } else {
    const at::Tensor lo = at::clamp_max(w.amin(2), 0.0), hi = at::clamp_min(w.amax(2), 0.0);
    scale = ScalesUpToHalf((hi - lo) / 15.0);
    zero = at::where(scale > 0, at::round(-lo / scale), at::zeros_like(scale)).clamp(0, 15);
  }
  const at::Tensor inv = at::where(scale > 0, 1.0 / scale, at::zeros_like(scale));
  const at::Tensor q = (at::round(w * inv.unsqueeze(2)) + zero.unsqueeze(2)).clamp(0, 15).reshape({N, K});
  return PackInt4(q.to(at::kByte), scale.contiguous(), zero.to(at::kByte).contiguous(), group_size);
}

Int4Weight PackInt4(const at::Tensor& q_in, const at::Tensor& scale, const at::Tensor& zero, std::int64_t group_size,
                    const at::Tensor& perm) {
  TORCH_CHECK(q_in.dim() == 2, "PackInt4: levels [N, K]");
  const std::int64_t N = q_in.size(0), K = q_in.size(1), Kp = Int4PaddedColumns(K);
  CheckGroups(K, group_size);
  TORCH_CHECK(scale.sizes() == at::IntArrayRef({N, K / group_size}) && zero.sizes() == scale.sizes(),
              "PackInt4: scale and zero must be [N, K / group_size]");
  TORCH_CHECK(q_in.min().item<std::int64_t>() >= 0 && q_in.max().item<std::int64_t>() <= 15 &&
                  zero.min().item<std::int64_t>() >= 0 && zero.max().item<std::int64_t>() <= 16,
              "PackInt4: levels must lie in [0, 15], zeros in [0, 16]");
  TORCH_CHECK(!perm.defined() || (perm.dim() == 1 && perm.size(0) == K &&
                                  at::equal(std::get<0>(perm.sort()), at::arange(K, perm.options()))),
              "PackInt4: perm must be a permutation of the K columns");
  // Padding columns: level 0 (x is zero there, so they add nothing).
  at::Tensor q = at::zeros({N, Kp}, at::kByte);
  q.narrow(1, 0, K).copy_(q_in.to(at::kByte));
  const at::Tensor blocks = q.reshape({N, Kp / 64, 2, 32});
  const at::Tensor lo = blocks.select(2, 0), hi = blocks.select(2, 1);
  Int4Weight w;
  w.packed = at::bitwise_or(lo, at::bitwise_left_shift(hi, 4)).reshape({N, Kp / 2}).contiguous();
  w.scale = scale.to(at::kFloat).contiguous();
  const at::Tensor half = w.scale.to(at::kHalf);
  if (at::equal(half.to(at::kFloat), w.scale)) w.scale16 = half.contiguous();
  w.zero = zero.to(at::kByte).contiguous();
  w.k = K;
  w.group_size = group_size;
  if (perm.defined()) w.perm = perm.to(at::kLong).contiguous();
  return w;
}

Int4Weight Int4WeightOn(Int4Weight w, const at::Device& device) {
  if (device.is_cpu()) return w;
  for (at::Tensor* t : {&w.packed, &w.scale, &w.zero, &w.perm})
    if (t->defined()) *t = t->to(device);
  w.scale16 = at::Tensor();
  return w;
}

namespace {

// The levels [N, Kp] uint8 with the padding columns past K (level 0).
at::Tensor PaddedLevels(const Int4Weight& w) {
  const std::int64_t N = w.packed.size(0), Kp = w.packed.size(1) * 2;
  const at::Tensor p = w.packed.reshape({N, Kp / 64, 1, 32});
  return at::cat({at::bitwise_and(p, 15), at::bitwise_right_shift(p, 4)}, 2).reshape({N, Kp});
}

}  // namespace

at::Tensor UnpackInt4(const Int4Weight& w) { return PaddedLevels(w).narrow(1, 0, w.k).contiguous(); }

at::Tensor DequantizeInt4(const Int4Weight& w, at::ScalarType dtype) {
  const at::Tensor q = UnpackInt4(w).to(at::kFloat);
  // Each group's value for each of its columns. (Not repeat_interleave: it
  // starts an OpenMP region however few the rows, and Int4Rows runs here
  // on every decode step of a tied 4-bit embedding.)
  const std::int64_t N = q.size(0), G = w.scale.size(1);
  auto per_column = [&](const at::Tensor& g) {
    return g.unsqueeze(2).expand({N, G, w.group_size}).reshape({N, G * w.group_size});
  };
  const at::Tensor zero = per_column(w.zero.to(at::kFloat));
  const at::Tensor scale = per_column(w.scale);
  const at::Tensor dense = ((q - zero) * scale).to(dtype);
  if (!w.perm.defined()) return dense;
  return at::empty_like(dense).index_copy_(1, w.perm, dense);
}

Int4MmaWeight Int4MmaLayout(const Int4Weight& w) {
  const std::int64_t N = w.packed.size(0), Kp = w.packed.size(1) * 2;
  TORCH_CHECK(N % 16 == 0, "Int4MmaLayout: N = ", N, " is not a multiple of 16");
  // The levels with their padding (0), as [ct, j, c, kc, wh, t, wl, h, e],
  // into the order of the layout: [ct, kc, c, t, wh, wl, e, j, h].
  const at::Tensor q = PaddedLevels(w)
                           .reshape({N / 16, 2, 8, Kp / 64, 2, 4, 2, 2, 2})
                           .permute({0, 3, 2, 5, 4, 6, 8, 1, 7})
                           .reshape({N / 16, Kp / 64, 32, 16, 2});
  Int4MmaWeight m;
  m.packed = at::bitwise_or(q.select(4, 0), at::bitwise_left_shift(q.select(4, 1), 4)).contiguous();
  m.scale = w.scale.t().contiguous();
  m.zero = w.zero.t().contiguous();
  m.n = N;
  m.k = w.k;
  m.group_size = w.group_size;
  m.perm = w.perm;
  return m;
}

at::Tensor Int4Rows(const Int4Weight& w, const at::Tensor& ids, at::ScalarType dtype) {
  Int4Weight rows = w;
  rows.packed = w.packed.index_select(0, ids);
  rows.scale = w.scale.index_select(0, ids);
  rows.scale16 = at::Tensor();  // DequantizeInt4 reads the float32 scales
  rows.zero = w.zero.index_select(0, ids);
  return DequantizeInt4(rows, dtype);
}

at::Tensor Int4DequantizedLinear(const at::Tensor& x, const Int4Weight& w, const at::Tensor& bias) {
  const at::Tensor dense = DequantizeInt4(w, x.scalar_type());
  return bias.defined() ? at::linear(x, dense, bias.to(x.scalar_type())) : at::linear(x, dense);
}

}  // namespace ropeserve
