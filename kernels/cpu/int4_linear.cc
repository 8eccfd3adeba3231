#include "kernels/cpu/int4_linear.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "kernels/cpu/int8_linear.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/thread_pool.h"

namespace ropeserve::cpu {

namespace {

// The packed layout both CPU kernels read (kernels/int4_weight.h): bytes of
// two 4-bit levels over the padded width, float32 scales and byte zero
// points per (output, group), all contiguous.
bool WeightLaidOut(const Int4Weight& w) {
  if (w.packed.dim() != 2 || w.packed.scalar_type() != at::kByte || !w.packed.is_contiguous()) return false;
  const std::int64_t N = w.packed.size(0), G = w.k / w.group_size;
  return w.packed.size(1) * 2 == Int4PaddedColumns(w.k) && w.scale.scalar_type() == at::kFloat &&
         w.scale.is_contiguous() && w.zero.scalar_type() == at::kByte && w.zero.is_contiguous() &&
         w.scale.sizes() == at::IntArrayRef({N, G}) && w.zero.sizes() == w.scale.sizes();
}

}  // namespace

bool Int4KernelSupports(const at::Tensor& x, const Int4Weight& w) {
  if (!x.device().is_cpu() || x.dim() != 2) return false;
  if (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16) return false;
  if (x.size(0) < 1 || x.size(0) > kInt4KernelMaxRows || x.size(1) != w.k) return false;
  return WeightLaidOut(w) &&
         (!w.scale16.defined() ||
          (w.scale16.scalar_type() == at::kHalf && w.scale16.is_contiguous() && w.scale16.sizes() == w.scale.sizes()));
}

at::Tensor Int4LinearKernel(const at::Tensor& x_in, const Int4Weight& w, const at::Tensor& bias_in) {
  TORCH_CHECK(Int4KernelSupports(x_in, w), "Int4LinearKernel: unsupported input");
  const at::Tensor x = x_in.contiguous();
  const std::int64_t M = x.size(0), K = w.k, N = w.packed.size(0), Kp = Int4PaddedColumns(K), G = K / w.group_size;
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
  return WeightLaidOut(w) && w.packed.size(0) >= 1;
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
  return Int4DequantizedLinear(x, w, bias);
}

}  // namespace ropeserve::cpu
