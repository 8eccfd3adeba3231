#include "kernels/cpu/packed_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "kernels/cpu/fused_ops.h"
#include "kernels/cpu/kernel_config.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/thread_pool.h"

namespace ropeserve::cpu {

namespace {
std::int64_t Panels(std::int64_t n) { return (n + kPackedPanel - 1) / kPackedPanel; }
std::int64_t Pairs(std::int64_t k) { return (k + 1) / 2; }
// At least ~256K multiply-adds per thread, so small layers stay on one.
std::int64_t Grain(std::int64_t M, std::int64_t K) {
  return std::max<std::int64_t>(1, (std::int64_t{1} << 18) / (K * kPackedPanel * M));
}

// x and bias checked against w and made contiguous (bias as float32), and
// the output allocated: what both dtypes' paths start with.
struct Operands {
  at::Tensor x, bias, out;
  std::int64_t M = 0;
};
Operands Prepare(const at::Tensor& x_in, const PackedWeight& w, const at::Tensor& bias_in) {
  const at::ScalarType dtype = w.data.scalar_type();
  TORCH_CHECK(x_in.dim() == 2 && x_in.size(1) == w.k && x_in.scalar_type() == dtype,
              "PackedLinear: x must be [M, K] in the weights' dtype (", dtype, ")");
  TORCH_CHECK(!bias_in.defined() || (bias_in.dim() == 1 && bias_in.size(0) == w.n), "PackedLinear: bias must be [N]");
  Operands o;
  o.x = x_in.contiguous();
  o.bias = bias_in.defined() ? bias_in.to(at::kFloat).contiguous() : bias_in;
  o.M = o.x.size(0);
  o.out = at::empty({o.M, w.n}, o.x.options());
  return o;
}

at::Tensor PackedLinearF32(const Operands& o, const PackedWeight& w) {
  const std::int64_t M = o.M, K = w.k, N = w.n;
  const float* xp = o.x.data_ptr<float>();
  const float* wp = w.data.data_ptr<float>();
  const float* bp = o.bias.defined() ? o.bias.data_ptr<float>() : nullptr;
  float* op = o.out.data_ptr<float>();
  const auto panels = ActiveKernels().packed_linear_f32_panels;
  ParallelFor(0, Panels(N), Grain(M, K),
              [&](std::int64_t begin, std::int64_t end) { panels(xp, M, K, wp, bp, op, N, begin, end); });
  return o.out;
}
}  // namespace

bool PackedLinearUsesAmx(std::int64_t M, std::int64_t K) {
  const std::int64_t min_rows = GetKernelConfig().amx_min_rows;  // 0: never
  return min_rows > 0 && M >= min_rows && K % 32 == 0 && ActiveKernels().amx_packed_linear_panels != nullptr;
}

at::Tensor AmxPaddedRows(const at::Tensor& x) {
  const std::int64_t M = x.size(0), Mp = (M + 31) / 32 * 32;
  if (Mp == M) return x.contiguous();
  at::Tensor padded = at::zeros({Mp, x.size(1)}, x.options());
  padded.narrow(0, 0, M).copy_(x);
  return padded;
}

PackedWeight PackWeight(const at::Tensor& w, at::ScalarType dtype) {
  TORCH_CHECK(w.dim() == 2 && w.size(0) >= 1 && w.size(1) >= 1, "PackWeight: w must be [N, K]");
  TORCH_CHECK(dtype == at::kBFloat16 || dtype == at::kFloat, "PackWeight: bfloat16 or float32 panels");
  const std::int64_t N = w.size(0), K = w.size(1), P = Panels(N);
  if (dtype == at::kFloat) {
    at::Tensor padded = at::zeros({P * kPackedPanel, K}, w.options().dtype(at::kFloat));
    padded.narrow(0, 0, N).copy_(w);
    // [P, 64, K] -> [P, K, 64]: each line holds the panel's 64 features of one column.
    return PackedWeight{padded.view({P, kPackedPanel, K}).permute({0, 2, 1}).contiguous(), N, K};
  }
  const std::int64_t KP = Pairs(K);
  at::Tensor padded = at::zeros({P * kPackedPanel, KP * 2}, w.options().dtype(at::kBFloat16));
  padded.narrow(0, 0, N).narrow(1, 0, K).copy_(w);
  // [P, 64, KP, 2] -> [P, KP, 64, 2]: each pair line holds the panel's 64 features.
  at::Tensor data = padded.view({P, kPackedPanel, KP, 2}).permute({0, 2, 1, 3}).contiguous();
  return PackedWeight{data, N, K};
}

namespace {
// The packed matrix indexed by (panel, feature in the panel), a view:
// float32 [P, 64, K], bfloat16 [P, 64, ceil(K / 2), 2].
at::Tensor ByFeature(const PackedWeight& w) {
  return w.is_float32() ? w.data.permute({0, 2, 1}) : w.data.permute({0, 2, 1, 3});
}
}  // namespace

at::Tensor UnpackWeight(const PackedWeight& w) {
  const std::int64_t features = w.data.size(0) * kPackedPanel;
  return ByFeature(w).reshape({features, -1}).narrow(0, 0, w.n).narrow(1, 0, w.k).contiguous();
}

at::Tensor PackedRows(const PackedWeight& w, const at::Tensor& ids_in) {
  const at::Tensor ids = ids_in.to(at::kLong);
  TORCH_CHECK(ids.dim() == 1, "PackedRows: ids must be [T]");
  // Only the rows asked for are gathered, then flattened (a tied
  // embedding's LM head is the model's largest matrix, read every step).
  const at::Tensor rows = ByFeature(w).index({at::div(ids, kPackedPanel, "floor"), at::remainder(ids, kPackedPanel)});
  return rows.reshape({ids.size(0), -1}).narrow(1, 0, w.k).contiguous();
}

at::Tensor PackedLinear(const at::Tensor& x_in, const PackedWeight& w, const at::Tensor& bias_in) {
  const Operands o = Prepare(x_in, w, bias_in);
  if (o.M == 0) return o.out;
  if (w.is_float32()) return PackedLinearF32(o, w);
  const at::Tensor& x = o.x;
  const at::Tensor& out = o.out;
  const std::int64_t M = o.M, K = w.k, N = w.n;
  const auto* xp = reinterpret_cast<const std::uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* wp = reinterpret_cast<const std::uint16_t*>(w.data.data_ptr<at::BFloat16>());
  const float* bp = o.bias.defined() ? o.bias.data_ptr<float>() : nullptr;
  auto* op = reinterpret_cast<std::uint16_t*>(out.data_ptr<at::BFloat16>());
  const std::int64_t grain = Grain(M, K);
  const CpuKernels& kernels = ActiveKernels();
  if (PackedLinearUsesAmx(M, K)) {
    const at::Tensor xpad = AmxPaddedRows(x);
    const auto* xpp = reinterpret_cast<const std::uint16_t*>(xpad.data_ptr<at::BFloat16>());
    ParallelFor(0, Panels(N), grain, [&](std::int64_t begin, std::int64_t end) {
      kernels.amx_packed_linear_panels(xpp, M, K, wp, bp, op, N, begin, end);
    });
    return out;
  }
  if (M > 2 && kernels.packed_linear_panels_float_x != nullptr) {
    const at::Tensor xf = ToFloat32(x);  // once, on the pool, for every chunk of panels
    const float* xfp = xf.data_ptr<float>();
    ParallelFor(0, Panels(N), grain, [&](std::int64_t begin, std::int64_t end) {
      kernels.packed_linear_panels_float_x(xfp, M, K, wp, bp, op, N, begin, end);
    });
    return out;
  }
  ParallelFor(0, Panels(N), grain, [&](std::int64_t begin, std::int64_t end) {
    kernels.packed_linear_panels(xp, M, K, wp, bp, op, N, begin, end);
  });
  return out;
}

}  // namespace ropeserve::cpu
