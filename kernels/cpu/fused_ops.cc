#include "kernels/cpu/fused_ops.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_utils.h"

namespace ropeserve::cpu {

namespace {

inline float ToFloat(float v) { return v; }
inline float ToFloat(at::BFloat16 v) { return static_cast<float>(v); }
template <typename Scalar>
inline Scalar Round(float v) {
  return static_cast<Scalar>(v);
}

// Rows of `n` floats: widened once into a float scratch row so that the
// arithmetic below is vectorised whatever the storage dtype.
template <typename Scalar>
inline void Widen(const Scalar* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = ToFloat(src[i]);
}

inline float SumSquares(const float* x, std::int64_t n) { return Dot(x, x, n); }

// out = weight * Scalar(x * inv_rms); for bfloat16 the product is rounded
// from the rounded normalised value, as `weight * h.to(dtype)` does.
template <typename Scalar>
inline void NormRow(const float* x, const Scalar* w, float* wf, Scalar* out, std::int64_t n, float inv) {
  if constexpr (std::is_same_v<Scalar, float>) {
    const Vec iv(inv);
    std::int64_t i = 0;
    for (; i + Vec::size() <= n; i += Vec::size()) (Vec::loadu(x + i) * iv * Vec::loadu(w + i)).store(out + i);
    for (; i < n; ++i) out[i] = x[i] * inv * w[i];
  } else {
    (void)wf;
    for (std::int64_t i = 0; i < n; ++i) {
      const float normed = ToFloat(Round<Scalar>(x[i] * inv));
      out[i] = Round<Scalar>(ToFloat(w[i]) * normed);
    }
  }
}

template <typename Scalar>
void RmsNormKernel(const Scalar* x, Scalar* residual, const Scalar* w, Scalar* out, std::int64_t rows, std::int64_t n,
                   double eps) {
  if constexpr (std::is_same_v<Scalar, at::BFloat16>) {
    auto bits = [](const at::BFloat16* p) { return reinterpret_cast<const std::uint16_t*>(p); };
    const auto rows_kernel = ActiveKernels().rms_norm_rows_bf16;
    ParallelFor(0, rows, 16, [&](std::int64_t begin, std::int64_t end) {
      rows_kernel(bits(x), reinterpret_cast<std::uint16_t*>(residual), bits(w), reinterpret_cast<std::uint16_t*>(out),
                  begin, end, n, eps);
    });
    return;
  }
  ParallelFor(0, rows, 16, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> row(static_cast<size_t>(n)), wf;
    for (std::int64_t r = begin; r < end; ++r) {
      const Scalar* xr = x + r * n;
      if (residual != nullptr) {
        // h = h + x, rounded to the storage dtype, then normalised.
        Scalar* hr = residual + r * n;
        for (std::int64_t i = 0; i < n; ++i) {
          hr[i] = Round<Scalar>(ToFloat(hr[i]) + ToFloat(xr[i]));
          row[i] = ToFloat(hr[i]);
        }
      } else {
        Widen(xr, row.data(), n);
      }
      const float mean = SumSquares(row.data(), n) / static_cast<float>(n);
      const float inv = 1.0f / std::sqrt(mean + static_cast<float>(eps));
      NormRow(row.data(), w, wf.data(), out + r * n, n, inv);
    }
  });
}

template <typename Scalar>
void RopeKernel(Scalar* x, std::int64_t T, std::int64_t H, std::int64_t D, const Scalar* cos, const Scalar* sin,
                std::int64_t rd) {
  const std::int64_t half = rd / 2;
  ParallelFor(0, T, 4, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> c(static_cast<size_t>(rd)), s(static_cast<size_t>(rd)), a(static_cast<size_t>(rd));
    for (std::int64_t t = begin; t < end; ++t) {
      Widen(cos + t * rd, c.data(), rd);
      Widen(sin + t * rd, s.data(), rd);
      for (std::int64_t h = 0; h < H; ++h) {
        Scalar* row = x + (t * H + h) * D;
        Widen(row, a.data(), rd);
        // out[i]      = x[i] * cos[i]           - x[i+half] * sin[i]
        // out[i+half] = x[i+half] * cos[i+half] + x[i] * sin[i+half]
        std::int64_t i = 0;
        if constexpr (std::is_same_v<Scalar, float>) {
          for (; i + Vec::size() <= half; i += Vec::size()) {
            const Vec x1 = Vec::loadu(a.data() + i), x2 = Vec::loadu(a.data() + half + i);
            (x1 * Vec::loadu(c.data() + i) - x2 * Vec::loadu(s.data() + i)).store(row + i);
            (x2 * Vec::loadu(c.data() + half + i) + x1 * Vec::loadu(s.data() + half + i)).store(row + half + i);
          }
        }
        for (; i < half; ++i) {
          const float x1 = a[i], x2 = a[half + i];
          row[i] = Round<Scalar>(x1 * c[i] - x2 * s[i]);
          row[half + i] = Round<Scalar>(x2 * c[half + i] + x1 * s[half + i]);
        }
      }
    }
  });
}

void CheckRows(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(x.is_contiguous() && x.dim() >= 1, "RmsNorm: x must be contiguous");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1) && weight.scalar_type() == x.scalar_type(),
              "RmsNorm: weight must be [n] in x's dtype");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, "RmsNorm: float32 or bfloat16");
}

}  // namespace

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  CheckRows(x, weight);
  const at::Tensor w = weight.contiguous();
  at::Tensor out = at::empty_like(x);
  const std::int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  if (x.scalar_type() == at::kFloat) {
    RmsNormKernel<float>(x.data_ptr<float>(), nullptr, w.data_ptr<float>(), out.data_ptr<float>(), rows, n, eps);
  } else {
    RmsNormKernel<at::BFloat16>(x.data_ptr<at::BFloat16>(), nullptr, w.data_ptr<at::BFloat16>(),
                                out.data_ptr<at::BFloat16>(), rows, n, eps);
  }
  return out;
}

at::Tensor AddRmsNorm(const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps) {
  CheckRows(x, weight);
  TORCH_CHECK(residual.is_contiguous() && residual.sizes() == x.sizes() && residual.scalar_type() == x.scalar_type(),
              "AddRmsNorm: residual must match x");
  const at::Tensor w = weight.contiguous();
  at::Tensor out = at::empty_like(x);
  const std::int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  if (x.scalar_type() == at::kFloat) {
    RmsNormKernel<float>(x.data_ptr<float>(), residual.data_ptr<float>(), w.data_ptr<float>(), out.data_ptr<float>(),
                         rows, n, eps);
  } else {
    RmsNormKernel<at::BFloat16>(x.data_ptr<at::BFloat16>(), residual.data_ptr<at::BFloat16>(),
                                w.data_ptr<at::BFloat16>(), out.data_ptr<at::BFloat16>(), rows, n, eps);
  }
  return out;
}

void ApplyRopeInplace(at::Tensor& q, at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && q.is_contiguous() && k.is_contiguous(),
              "RoPE: q, k [T, H, D] contiguous");
  TORCH_CHECK(cos.dim() == 2 && cos.sizes() == sin.sizes() && cos.size(0) == q.size(0) && k.size(0) == q.size(0),
              "RoPE: cos/sin must be [T, rotary_dim]");
  const std::int64_t rd = cos.size(1);
  TORCH_CHECK(rd % 2 == 0 && rd <= q.size(2) && q.size(2) == k.size(2), "RoPE: rotary_dim even and <= head_dim");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == cos.scalar_type(), "RoPE: dtypes differ");
  const at::Tensor c = cos.contiguous(), s = sin.contiguous();
  const std::int64_t T = q.size(0), D = q.size(2);
  if (q.scalar_type() == at::kFloat) {
    RopeKernel(q.data_ptr<float>(), T, q.size(1), D, c.data_ptr<float>(), s.data_ptr<float>(), rd);
    RopeKernel(k.data_ptr<float>(), T, k.size(1), D, c.data_ptr<float>(), s.data_ptr<float>(), rd);
  } else {
    TORCH_CHECK(q.scalar_type() == at::kBFloat16, "RoPE: float32 or bfloat16");
    RopeKernel(q.data_ptr<at::BFloat16>(), T, q.size(1), D, c.data_ptr<at::BFloat16>(), s.data_ptr<at::BFloat16>(), rd);
    RopeKernel(k.data_ptr<at::BFloat16>(), T, k.size(1), D, c.data_ptr<at::BFloat16>(), s.data_ptr<at::BFloat16>(), rd);
  }
}

at::Tensor SiluAndMul(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0, "SiluAndMul: gate_up must be [T, 2 I]");
  const std::int64_t T = gate_up.size(0), I = gate_up.size(1) / 2;
  if (gate_up.scalar_type() != at::kBFloat16) return at::silu(gate_up.narrow(1, 0, I)) * gate_up.narrow(1, I, I);
  const at::Tensor x = gate_up.contiguous();
  at::Tensor out = at::empty({T, I}, x.options());
  const auto* xp = reinterpret_cast<const std::uint16_t*>(x.data_ptr<at::BFloat16>());
  auto* op = reinterpret_cast<std::uint16_t*>(out.data_ptr<at::BFloat16>());
  ParallelFor(0, T, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(I, 1)),
              [&, rows_kernel = ActiveKernels().silu_and_mul_rows_bf16](std::int64_t begin, std::int64_t end) {
                rows_kernel(xp, op, begin, end, I);
              });
  return out;
}

at::Tensor ToFloat32(const at::Tensor& x) {
  if (x.scalar_type() == at::kFloat) return x;
  if (x.scalar_type() != at::kBFloat16 || !x.is_cpu()) return x.to(at::kFloat);
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty(in.sizes(), in.options().dtype(at::kFloat));
  const at::BFloat16* src = in.data_ptr<at::BFloat16>();
  float* dst = out.data_ptr<float>();
  ParallelFor(0, in.numel(), 1 << 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) dst[i] = ToFloat(src[i]);
  });
  return out;
}

}  // namespace ropeserve::cpu
