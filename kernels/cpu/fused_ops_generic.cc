// The bfloat16 row kernels of fused_ops_core.h in scalar C++: the
// reference the vector variants are tested against, rounding as that
// header says. No LibTorch header, no ISA flags.
#include <cmath>

#include "kernels/cpu/bf16_bits.h"
#include "kernels/cpu/fused_ops_core.h"

namespace ropeserve::cpu::generic {

namespace {
inline float RoundBf16(float v) { return Bf16ToFloat(FloatToBf16(v)); }
}  // namespace

void RmsNormRowsBf16(const std::uint16_t* x, std::uint16_t* residual, const std::uint16_t* w, std::uint16_t* out,
                     std::int64_t row_begin, std::int64_t row_end, std::int64_t n, double eps) {
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const std::uint16_t* xr = x + r * n;
    const std::uint16_t* src = residual != nullptr ? residual + r * n : xr;
    float squares = 0.0f;
    for (std::int64_t i = 0; i < n; ++i) {
      float v = Bf16ToFloat(xr[i]);
      if (residual != nullptr) {
        v = RoundBf16(Bf16ToFloat(residual[r * n + i]) + v);  // h = h + x, rounded
        residual[r * n + i] = FloatToBf16(v);
      }
      squares = std::fma(v, v, squares);
    }
    const float inv = 1.0f / std::sqrt(squares / static_cast<float>(n) + static_cast<float>(eps));
    for (std::int64_t i = 0; i < n; ++i)
      out[r * n + i] = FloatToBf16(Bf16ToFloat(w[i]) * RoundBf16(Bf16ToFloat(src[i]) * inv));
  }
}

void SiluAndMulRowsBf16(const std::uint16_t* gate_up, std::uint16_t* out, std::int64_t row_begin, std::int64_t row_end,
                        std::int64_t I) {
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const std::uint16_t* g = gate_up + r * 2 * I;
    const std::uint16_t* u = g + I;
    for (std::int64_t i = 0; i < I; ++i) {
      const float gv = Bf16ToFloat(g[i]);
      const float silu = RoundBf16(gv / (1.0f + std::exp(-gv)));
      out[r * I + i] = FloatToBf16(silu * Bf16ToFloat(u[i]));
    }
  }
}

}  // namespace ropeserve::cpu::generic
