#include "kernels/cpu/small_batch_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace ropeserve::cpu {

namespace avx512 {
void SmallBatchLinearRange(const uint16_t* x, int64_t M, int64_t K, const uint16_t* w, const uint16_t* bias,
                           uint16_t* out, int64_t N, int64_t n_begin, int64_t n_end);
}

int64_t SmallBatchMaxRows() {
  static const int64_t rows = RowsFromEnv("ROPESERVE_SMALL_BATCH_MAX_ROWS", 8, kSmallBatchKernelMaxRows);
  return rows;
}

bool SmallBatchLinearApplies(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  return x.dim() == 2 && x.size(0) <= SmallBatchMaxRows() && SmallBatchLinearSupports(x, w, bias);
}

bool SmallBatchLinearSupports(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  if (!CpuHasAvx512Bf16()) return false;
  if (!x.device().is_cpu() || x.scalar_type() != at::kBFloat16 || w.scalar_type() != at::kBFloat16) return false;
  if (x.dim() != 2 || w.dim() != 2 || x.size(0) < 1 || x.size(0) > kSmallBatchKernelMaxRows || x.size(1) != w.size(1)) {
    return false;
  }
  if (!w.is_contiguous()) return false;
  return !bias.defined() || (bias.scalar_type() == at::kBFloat16 && bias.dim() == 1 && bias.size(0) == w.size(0));
}

at::Tensor SmallBatchLinear(const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& bias_in) {
  TORCH_CHECK(SmallBatchLinearSupports(x_in, w, bias_in), "SmallBatchLinear: unsupported input");
  const at::Tensor x = x_in.contiguous();
  const at::Tensor bias = bias_in.defined() ? bias_in.contiguous() : bias_in;
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  at::Tensor out = at::empty({M, N}, x.options());
  const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  const auto* bp = bias.defined() ? reinterpret_cast<const uint16_t*>(bias.data_ptr<at::BFloat16>()) : nullptr;
  auto* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  // Work items of whole groups of 4 weight rows; at least ~64 KB of weights
  // each so that the threads' start-up cost stays small.
  const int64_t grain = std::max<int64_t>(4, (32768 / std::max<int64_t>(K, 1)) / 4 * 4);
  ParallelFor(0, (N + 3) / 4, std::max<int64_t>(1, grain / 4), [&](int64_t begin, int64_t end) {
    avx512::SmallBatchLinearRange(xp, M, K, wp, bp, op, N, begin * 4, std::min(end * 4, N));
  });
  return out;
}

}  // namespace ropeserve::cpu
