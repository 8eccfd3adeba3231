#include "kernels/cpu/int4_linear.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "kernels/cpu/int8_linear.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/thread_pool.h"

namespace ropeserve::cpu {

namespace {

std::int64_t Padded(std::int64_t k) { return (k + 63) / 64 * 64; }

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
  const std::int64_t N = q_in.size(0), K = q_in.size(1), Kp = Padded(K);
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

at::Tensor UnpackInt4(const Int4Weight& w) {
  const std::int64_t N = w.packed.size(0), Kp = w.packed.size(1) * 2;
  const at::Tensor p = w.packed.reshape({N, Kp / 64, 1, 32});
  const at::Tensor both = at::cat({at::bitwise_and(p, 15), at::bitwise_right_shift(p, 4)}, 2);
  return both.reshape({N, Kp}).narrow(1, 0, w.k).contiguous();
}

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

at::Tensor Int4Rows(const Int4Weight& w, const at::Tensor& ids, at::ScalarType dtype) {
  Int4Weight rows = w;
  rows.packed = w.packed.index_select(0, ids);
  rows.scale = w.scale.index_select(0, ids);
  rows.scale16 = at::Tensor();  // DequantizeInt4 reads the float32 scales
  rows.zero = w.zero.index_select(0, ids);
  return DequantizeInt4(rows, dtype);
}

bool Int4KernelSupports(const at::Tensor& x, const Int4Weight& w) {
  if (!x.device().is_cpu() || x.dim() != 2) return false;
  if (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16) return false;
  if (x.size(0) < 1 || x.size(0) > kInt4KernelMaxRows || x.size(1) != w.k) return false;
  const std::int64_t N = w.packed.size(0), G = w.k / w.group_size;
  return w.packed.scalar_type() == at::kByte && w.packed.is_contiguous() && w.packed.size(1) * 2 == Padded(w.k) &&
         w.scale.scalar_type() == at::kFloat && w.scale.is_contiguous() && w.zero.scalar_type() == at::kByte &&
         w.zero.is_contiguous() && w.scale.sizes() == at::IntArrayRef({N, G}) && w.zero.sizes() == w.scale.sizes() &&
         (!w.scale16.defined() ||
          (w.scale16.scalar_type() == at::kHalf && w.scale16.is_contiguous() && w.scale16.sizes() == w.scale.sizes()));
}

at::Tensor Int4LinearKernel(const at::Tensor& x_in, const Int4Weight& w, const at::Tensor& bias_in) {
  TORCH_CHECK(Int4KernelSupports(x_in, w), "Int4LinearKernel: unsupported input");
  const at::Tensor x = x_in.contiguous();
  const std::int64_t M = x.size(0), K = w.k, N = w.packed.size(0), Kp = Padded(K), G = K / w.group_size;
  TORCH_CHECK(!bias_in.defined() || (bias_in.dim() == 1 && bias_in.size(0) == N), "Int4LinearKernel: bias shape");
  const at::Tensor bias = bias_in.defined() ? bias_in.to(at::kFloat).contiguous() : at::Tensor();
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  const CpuKernels& kernels = ActiveKernels();
  // x's levels: int8 per group (the table's int4_int8_x) or int16 per row.
  at::Tensor xq, xs, xsum;
  if (kernels.int4_int8_x) {
    xq = at::empty({M, Kp}, at::kChar);
    xs = at::empty({M, G}, at::kFloat);
    xsum = at::empty({M, G}, at::kInt);
    kernels.quantize_groups_int8(x.data_ptr(), bf16, M, K, Kp, w.group_size, xq.data_ptr<std::int8_t>(),
                                 xs.data_ptr<float>(), xsum.data_ptr<std::int32_t>());
  } else {
    xq = at::empty({M, Kp}, at::kShort);
    xs = at::empty({M}, at::kFloat);
    kernels.quantize_rows_int16(x.data_ptr(), bf16, M, K, Kp, kInt8ActivationLevels, xq.data_ptr<std::int16_t>(),
                                xs.data_ptr<float>());
  }
  at::Tensor out = at::empty({M, N}, x.options());
  const float* xsp = xs.data_ptr<float>();
  const std::uint8_t* pp = w.packed.data_ptr<std::uint8_t>();
  const float* sp = w.scale.data_ptr<float>();
  const auto* sp16 =
      w.scale16.defined() ? reinterpret_cast<const std::uint16_t*>(w.scale16.data_ptr<at::Half>()) : nullptr;
  const std::uint8_t* zp = w.zero.data_ptr<std::uint8_t>();
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  void* op = out.data_ptr();
  // Work items of whole groups of 4 weight rows, at least ~16 KB of packed weights each.
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(Kp / 2, 1) / 4);
  const auto* xq8 = kernels.int4_int8_x ? xq.data_ptr<std::int8_t>() : nullptr;
  const auto* xq16 = kernels.int4_int8_x ? nullptr : xq.data_ptr<std::int16_t>();
  const auto* xsump = kernels.int4_int8_x ? xsum.data_ptr<std::int32_t>() : nullptr;
  ParallelFor(0, (N + 3) / 4, grain, [&](std::int64_t begin, std::int64_t end) {
    const std::int64_t nb = begin * 4, ne = std::min(end * 4, N);
    if (xq8 != nullptr)
      kernels.int4_linear_range_int8_x(xq8, xsp, xsump, M, Kp, pp, sp, sp16, zp, K, w.group_size, bp, op, bf16, N, nb,
                                       ne);
    else
      kernels.int4_linear_range(xq16, xsp, M, Kp, pp, sp, sp16, zp, K, w.group_size, bp, op, bf16, N, nb, ne);
  });
  return out;
}

bool Int4PanelSupports(const at::Tensor& x, const Int4Weight& w) {
  if (!x.device().is_cpu() || x.dim() != 2 || x.scalar_type() != at::kBFloat16) return false;
  if (x.size(0) < 1 || x.size(1) != w.k || w.k % 32 != 0) return false;
  const std::int64_t N = w.packed.size(0), G = w.k / w.group_size;
  return N >= 1 && w.packed.scalar_type() == at::kByte && w.packed.is_contiguous() &&
         w.packed.size(1) * 2 == Padded(w.k) && w.scale.scalar_type() == at::kFloat && w.scale.is_contiguous() &&
         w.zero.scalar_type() == at::kByte && w.zero.is_contiguous() && w.scale.sizes() == at::IntArrayRef({N, G}) &&
         w.zero.sizes() == w.scale.sizes();
}

at::Tensor Int4PanelLinear(const at::Tensor& x_in, const Int4Weight& w, const at::Tensor& bias_in) {
  TORCH_CHECK(Int4PanelSupports(x_in, w), "Int4PanelLinear: unsupported input");
  const at::Tensor x = x_in.contiguous();
  const std::int64_t M = x.size(0), K = w.k, N = w.packed.size(0);
  TORCH_CHECK(!bias_in.defined() || (bias_in.dim() == 1 && bias_in.size(0) == N), "Int4PanelLinear: bias shape");
  const at::Tensor bias = bias_in.defined() ? bias_in.to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor out = at::empty({M, N}, x.options());
  const std::uint8_t* pp = w.packed.data_ptr<std::uint8_t>();
  const float* sp = w.scale.data_ptr<float>();
  const std::uint8_t* zp = w.zero.data_ptr<std::uint8_t>();
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  auto* op = reinterpret_cast<std::uint16_t*>(out.data_ptr<at::BFloat16>());
  // As Int8PanelLinear's: at least ~256K multiply-adds per thread.
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 18) / (K * kPackedPanel * M));
  const bool amx = PackedLinearUsesAmx(M, K);
  const at::Tensor xpad = amx ? AmxPaddedRows(x) : x;
  const auto* xpp = reinterpret_cast<const std::uint16_t*>(xpad.data_ptr<at::BFloat16>());
  const CpuKernels& kernels = ActiveKernels();
  const auto panels = amx ? kernels.amx_int4_panel_linear_panels : kernels.int4_panel_linear_panels;
  ParallelFor(0, (N + kPackedPanel - 1) / kPackedPanel, grain, [&](std::int64_t begin, std::int64_t end) {
    panels(xpp, M, K, pp, sp, zp, w.group_size, bp, op, N, begin, end);
  });
  return out;
}

at::Tensor Int4Linear(const at::Tensor& x, const Int4Weight& w, const at::Tensor& bias) {
  auto in_kernel_order = [&] { return w.perm.defined() ? x.index_select(1, w.perm) : x; };
  const bool panel = Int4PanelSupports(x, w);
  // The kernel up to the ISA's crossover; past it the panels where they take x.
  if (Int4KernelSupports(x, w) && (!panel || x.size(0) <= ActiveKernels().int4_kernel_max_rows))
    return Int4LinearKernel(in_kernel_order(), w, bias);
  if (panel) return Int4PanelLinear(in_kernel_order(), w, bias);
  const at::Tensor dense = DequantizeInt4(w, x.scalar_type());
  return bias.defined() ? at::linear(x, dense, bias.to(x.scalar_type())) : at::linear(x, dense);
}

}  // namespace ropeserve::cpu
