// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (see
// CMakeLists.txt) and only called after a run-time CPU check: the bfloat16
// paths of kernels/cpu/fused_ops.cc, rounding exactly where the generic
// code (and the LibTorch ops of the reference) round.
#include <cmath>

#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/fused_ops_core.h"

namespace ropeserve::cpu::avx512 {

void RmsNormRowsBf16(const std::uint16_t* x, std::uint16_t* residual, const std::uint16_t* w, std::uint16_t* out,
                     std::int64_t row_begin, std::int64_t row_end, std::int64_t n, double eps) {
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const std::uint16_t* xr = x + r * n;
    // The row whose norm is taken: residual + x rounded to bfloat16 and
    // stored back (h = h + x), or x itself.
    const std::uint16_t* src = residual != nullptr ? residual + r * n : xr;
    __m512 squares = _mm512_setzero_ps();
    for (std::int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = Mask16(n - i);
      __m512 v = LoadBf16(xr + i, m);
      if (residual != nullptr) {
        v = RoundBf16(_mm512_add_ps(LoadBf16(residual + r * n + i, m), v));
        StoreBf16(residual + r * n + i, v, m);
      }
      squares = _mm512_fmadd_ps(v, v, squares);
    }
    const float mean = _mm512_reduce_add_ps(squares) / static_cast<float>(n);
    const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(mean + static_cast<float>(eps)));
    for (std::int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = Mask16(n - i);
      const __m512 normed = RoundBf16(_mm512_mul_ps(LoadBf16(src + i, m), inv));
      StoreBf16(out + r * n + i, _mm512_mul_ps(LoadBf16(w + i, m), normed), m);
    }
  }
}

void SiluAndMulRowsBf16(const std::uint16_t* gate_up, std::uint16_t* out, std::int64_t row_begin, std::int64_t row_end,
                        std::int64_t I) {
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const std::uint16_t* g = gate_up + r * 2 * I;
    const std::uint16_t* u = g + I;
    for (std::int64_t i = 0; i < I; i += 16) {
      const __mmask16 m = Mask16(I - i);
      const __m512 gv = LoadBf16(g + i, m);
      // silu(g) = g / (1 + exp(-g)) in float32, rounded to bfloat16 (at::silu), times up, rounded.
      const __m512 silu = RoundBf16(
          _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), Exp(_mm512_sub_ps(_mm512_setzero_ps(), gv)))));
      StoreBf16(out + r * I + i, _mm512_mul_ps(silu, LoadBf16(u + i, m)), m);
    }
  }
}

}  // namespace ropeserve::cpu::avx512
