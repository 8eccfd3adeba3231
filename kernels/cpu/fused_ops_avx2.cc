// The bfloat16 row kernels of fused_ops_core.h on AVX2 + FMA (compiled
// with -mavx2 -mfma -mf16c, called through the kernel table), rounding as
// that header says.
#include <cmath>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/fused_ops_core.h"

namespace ropeserve::cpu::avx2 {

void RmsNormRowsBf16(const std::uint16_t* x, std::uint16_t* residual, const std::uint16_t* w, std::uint16_t* out,
                     std::int64_t row_begin, std::int64_t row_end, std::int64_t n, double eps) {
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const std::uint16_t* xr = x + r * n;
    const std::uint16_t* src = residual != nullptr ? residual + r * n : xr;
    __m256 squares = _mm256_setzero_ps();
    for (std::int64_t i = 0; i < n; i += 8) {
      const std::int64_t left = n - i;
      __m256 v = LoadBf16(xr + i, left);
      if (residual != nullptr) {
        v = RoundBf16(_mm256_add_ps(LoadBf16(residual + r * n + i, left), v));
        StoreBf16(residual + r * n + i, v, left);
      }
      squares = _mm256_fmadd_ps(v, v, squares);
    }
    const float mean = ReduceAdd(squares) / static_cast<float>(n);
    const __m256 inv = _mm256_set1_ps(1.0f / std::sqrt(mean + static_cast<float>(eps)));
    for (std::int64_t i = 0; i < n; i += 8) {
      const std::int64_t left = n - i;
      const __m256 normed = RoundBf16(_mm256_mul_ps(LoadBf16(src + i, left), inv));
      StoreBf16(out + r * n + i, _mm256_mul_ps(LoadBf16(w + i, left), normed), left);
    }
  }
}

void SiluAndMulRowsBf16(const std::uint16_t* gate_up, std::uint16_t* out, std::int64_t row_begin, std::int64_t row_end,
                        std::int64_t I) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const std::uint16_t* g = gate_up + r * 2 * I;
    const std::uint16_t* u = g + I;
    for (std::int64_t i = 0; i < I; i += 8) {
      const std::int64_t left = I - i;
      const __m256 gv = LoadBf16(g + i, left);
      const __m256 silu = RoundBf16(_mm256_div_ps(gv, _mm256_add_ps(one, Exp(_mm256_sub_ps(_mm256_setzero_ps(), gv)))));
      StoreBf16(out + r * I + i, _mm256_mul_ps(silu, LoadBf16(u + i, left)), left);
    }
  }
}

}  // namespace ropeserve::cpu::avx2
