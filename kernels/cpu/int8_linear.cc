#include "kernels/cpu/int8_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "kernels/cpu/kernel_config.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/thread_pool.h"

namespace ropeserve::cpu {

Int8Weight QuantizeInt8(const at::Tensor& w_in) {
  TORCH_CHECK(w_in.dim() == 2 && w_in.is_floating_point(), "QuantizeInt8: a floating [N, K] matrix");
  const at::Tensor w = w_in.to(at::kFloat);
  const at::Tensor amax = w.abs().amax(1);
  const at::Tensor inv = at::where(amax > 0, 127.0 / amax, at::zeros_like(amax));
  Int8Weight out;
  out.q = at::round(w * inv.unsqueeze(1)).clamp(-127, 127).to(at::kChar).contiguous();
  out.scale = (amax / 127.0).contiguous();
  return out;
}

at::Tensor DequantizeInt8(const Int8Weight& w, at::ScalarType dtype) {
  if (!w.q.is_cpu() || (dtype != at::kFloat && dtype != at::kBFloat16) || !w.q.is_contiguous() ||
      !w.scale.is_contiguous() || w.q.scalar_type() != at::kChar || w.scale.scalar_type() != at::kFloat)
    return (w.q.to(at::kFloat) * w.scale.unsqueeze(1)).to(dtype);
  // One pass (int8 -> float32 * scale -> dtype) instead of three ATen ops:
  // prefill dequantizes every weight once per step.
  const std::int64_t N = w.q.size(0), K = w.q.size(1);
  at::Tensor out = at::empty({N, K}, w.q.options().dtype(dtype));
  const std::int8_t* qp = w.q.data_ptr<std::int8_t>();
  const float* sp = w.scale.data_ptr<float>();
  void* op = out.data_ptr();
  const bool bf16 = dtype == at::kBFloat16;
  const CpuKernels& kernels = ActiveKernels();
  ParallelFor(
      0, N, std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(K, 1)),
      [&](std::int64_t begin, std::int64_t end) { kernels.dequantize_int8_rows(qp, sp, K, op, bf16, begin, end); });
  return out;
}

at::Tensor Int8Rows(const Int8Weight& w, const at::Tensor& ids, at::ScalarType dtype) {
  return DequantizeInt8(Int8Weight{w.q.index_select(0, ids), w.scale.index_select(0, ids)}, dtype);
}

std::int64_t Int8KernelMaxRows() { return EffectiveInt8VnniMaxRows(GetKernelConfig()); }

namespace {
// What both kernels need of x [M, K] and the weight: a CPU matrix with at
// least one row, contiguous int8 [N, K] and float32 scales [N].
bool KernelInputs(const at::Tensor& x, const Int8Weight& w) {
  if (!x.device().is_cpu() || x.dim() != 2 || x.size(0) < 1) return false;
  return w.q.scalar_type() == at::kChar && w.q.dim() == 2 && w.q.is_contiguous() && w.q.size(1) == x.size(1) &&
         w.scale.scalar_type() == at::kFloat && w.scale.is_contiguous() && w.scale.numel() == w.q.size(0);
}
}  // namespace

bool Int8KernelSupports(const at::Tensor& x, const Int8Weight& w) {
  if (!KernelInputs(x, w)) return false;
  return (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) && x.size(0) <= kInt8KernelMaxRows;
}

at::Tensor Int8LinearKernel(const at::Tensor& x_in, const Int8Weight& w, const at::Tensor& bias_in) {
  TORCH_CHECK(Int8KernelSupports(x_in, w), "Int8LinearKernel: unsupported input");
  const at::Tensor x = x_in.contiguous();
  const std::int64_t M = x.size(0), K = x.size(1), N = w.q.size(0), Kp = (K + 31) / 32 * 32;
  TORCH_CHECK(!bias_in.defined() || (bias_in.dim() == 1 && bias_in.size(0) == N), "Int8LinearKernel: bias shape");
  // (A float32 bias, as the model stores it for int8 weights, is used as is.)
  const at::Tensor bias = bias_in.defined() ? bias_in.to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor xq = at::empty({M, Kp}, at::kShort);
  at::Tensor xs = at::empty({M}, at::kFloat);
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  const CpuKernels& kernels = ActiveKernels();
  kernels.quantize_rows_int16(x.data_ptr(), bf16, M, K, Kp, kInt8ActivationLevels, xq.data_ptr<std::int16_t>(),
                              xs.data_ptr<float>());
  at::Tensor out = at::empty({M, N}, x.options());
  const std::int16_t* xqp = xq.data_ptr<std::int16_t>();
  const float* xsp = xs.data_ptr<float>();
  const std::int8_t* wp = w.q.data_ptr<std::int8_t>();
  const float* wsp = w.scale.data_ptr<float>();
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  void* op = out.data_ptr();
  // Work items of whole groups of 4 weight rows, at least ~32 KB of weights each.
  const std::int64_t grain = std::max<std::int64_t>(4, (32768 / std::max<std::int64_t>(K, 1)) / 4 * 4);
  ParallelFor(0, (N + 3) / 4, std::max<std::int64_t>(1, grain / 4), [&](std::int64_t begin, std::int64_t end) {
    kernels.int8_linear_range(xqp, xsp, M, Kp, wp, wsp, K, bp, op, bf16, N, begin * 4, std::min(end * 4, N));
  });
  return out;
}

bool Int8PanelSupports(const at::Tensor& x, const Int8Weight& w) {
  if (!KernelInputs(x, w)) return false;
  return x.scalar_type() == at::kBFloat16 && w.q.size(0) >= 1;
}

at::Tensor Int8PanelLinear(const at::Tensor& x_in, const Int8Weight& w, const at::Tensor& bias_in) {
  TORCH_CHECK(Int8PanelSupports(x_in, w), "Int8PanelLinear: unsupported input");
  const at::Tensor x = x_in.contiguous();
  const std::int64_t M = x.size(0), K = x.size(1), N = w.q.size(0);
  TORCH_CHECK(!bias_in.defined() || (bias_in.dim() == 1 && bias_in.size(0) == N), "Int8PanelLinear: bias shape");
  const at::Tensor bias = bias_in.defined() ? bias_in.to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor out = at::empty({M, N}, x.options());
  const std::int8_t* qp = w.q.data_ptr<std::int8_t>();
  const float* sp = w.scale.data_ptr<float>();
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  auto* op = reinterpret_cast<std::uint16_t*>(out.data_ptr<at::BFloat16>());
  // As PackedLinear's: at least ~256K multiply-adds per thread.
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 18) / (K * kPackedPanel * M));
  const bool amx = PackedLinearUsesAmx(M, K);
  const at::Tensor xpad = amx ? AmxPaddedRows(x) : x;
  const auto* xpp = reinterpret_cast<const std::uint16_t*>(xpad.data_ptr<at::BFloat16>());
  const CpuKernels& kernels = ActiveKernels();
  const auto panels = amx ? kernels.amx_int8_panel_linear_panels : kernels.int8_panel_linear_panels;
  ParallelFor(0, (N + kPackedPanel - 1) / kPackedPanel, grain,
              [&](std::int64_t begin, std::int64_t end) { panels(xpp, M, K, qp, sp, bp, op, N, begin, end); });
  return out;
}

at::Tensor Int8Linear(const at::Tensor& x, const Int8Weight& w, const at::Tensor& bias) {
  if (x.dim() == 2 && x.size(0) <= Int8KernelMaxRows() && Int8KernelSupports(x, w)) return Int8LinearKernel(x, w, bias);
  if (Int8PanelSupports(x, w)) return Int8PanelLinear(x, w, bias);
  const at::Tensor dense = DequantizeInt8(w, x.scalar_type());
  return bias.defined() ? at::linear(x, dense, bias.to(x.scalar_type())) : at::linear(x, dense);
}

}  // namespace ropeserve::cpu
