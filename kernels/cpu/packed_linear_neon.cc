// The packed GEMM (kernels/cpu/packed_linear.h) on aarch64 Advanced SIMD:
// bf16 weights widened to float32 in registers (a shift for w[n][k], a mask
// for w[n][k+1]) and fused multiply-adds, 4 rows x 16 features of sums in
// registers over all of K. The arithmetic is the generic variant's and the
// AVX2 one's: one fma chain over k in order per output, + bias, rounded to
// bfloat16: equal bit for bit (tests/kernels/cores). Baseline armv8-a (no
// flags); called through the kernel table; no LibTorch header. Tested under
// qemu-user (scripts/test-arm64), not timed: no ARM machine here.
#include <arm_neon.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/bf16_bits.h"

namespace ropeserve::cpu::neon {

namespace {

constexpr std::int64_t kPanel = 64, kPairLine = kPanel * 2;

inline float32x4_t Even(uint32x4_t u) { return vreinterpretq_f32_u32(vshlq_n_u32(u, 16)); }
inline float32x4_t Odd(uint32x4_t u) { return vreinterpretq_f32_u32(vandq_u32(u, vdupq_n_u32(0xffff0000u))); }

// Rows [0, R) x features [f0, f0 + 16) of one panel over all of K.
template <int R>
void Tile(const std::uint16_t* x, std::int64_t K, const std::uint16_t* panel, std::int64_t f0, const float* bias,
          std::uint16_t* out, std::int64_t N, std::int64_t cols) {
  float32x4_t acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = vdupq_n_f32(0.0f);
  const std::int64_t full = K / 2;
  const std::uint16_t* wp = panel + 2 * f0;
  std::int64_t p = 0;
  for (; p < full; ++p, wp += kPairLine) {
    float xe[R], xo[R];
    for (int r = 0; r < R; ++r) {
      xe[r] = Bf16ToFloat(x[r * K + 2 * p]);
      xo[r] = Bf16ToFloat(x[r * K + 2 * p + 1]);
    }
    for (int v = 0; v < 4; ++v) {
      const uint32x4_t u = vreinterpretq_u32_u16(vld1q_u16(wp + 8 * v));  // 4 pairs: features f0 + 4v ..
      const float32x4_t we = Even(u), wo = Odd(u);
      for (int r = 0; r < R; ++r) {
        acc[r][v] = vfmaq_n_f32(acc[r][v], we, xe[r]);
        acc[r][v] = vfmaq_n_f32(acc[r][v], wo, xo[r]);
      }
    }
  }
  if (K % 2 != 0)  // the last column alone (its pair's second weight is padding)
    for (int v = 0; v < 4; ++v) {
      const float32x4_t we = Even(vreinterpretq_u32_u16(vld1q_u16(wp + 8 * v)));
      for (int r = 0; r < R; ++r) acc[r][v] = vfmaq_n_f32(acc[r][v], we, Bf16ToFloat(x[r * K + K - 1]));
    }
  for (int r = 0; r < R; ++r) {
    float sums[16];
    for (int v = 0; v < 4; ++v) vst1q_f32(sums + 4 * v, acc[r][v]);
    for (std::int64_t f = f0; f < std::min(f0 + 16, cols); ++f)
      out[r * N + f] = FloatToBf16(sums[f - f0] + (bias != nullptr ? bias[f] : 0.0f));
  }
}

}  // namespace

void PackedLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint16_t* packed,
                        const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin,
                        std::int64_t p_end) {
  const std::int64_t panel_size = (K + 1) / 2 * kPairLine;
  for (std::int64_t p = p_begin; p < p_end; ++p) {
    const std::uint16_t* panel = packed + p * panel_size;
    const std::int64_t n0 = p * kPanel, cols = std::min(kPanel, N - n0);
    const float* b = bias != nullptr ? bias + n0 : nullptr;
    for (std::int64_t m0 = 0; m0 < M; m0 += 4)
      for (std::int64_t f0 = 0; f0 < cols; f0 += 16) {
        const std::uint16_t* xs = x + m0 * K;
        std::uint16_t* os = out + m0 * N + n0;
        switch (std::min<std::int64_t>(4, M - m0)) {
          case 1:
            Tile<1>(xs, K, panel, f0, b, os, N, cols);
            break;
          case 2:
            Tile<2>(xs, K, panel, f0, b, os, N, cols);
            break;
          case 3:
            Tile<3>(xs, K, panel, f0, b, os, N, cols);
            break;
          default:
            Tile<4>(xs, K, panel, f0, b, os, N, cols);
            break;
        }
      }
  }
}

}  // namespace ropeserve::cpu::neon

namespace ropeserve::cpu::neon {

// Float32 panels ([K][64] float32): 4 rows x 16 features of sums, one
// fma chain over k per output (vfmaq_n_f32 is fused), so the same bits as
// the generic, AVX2 and AVX-512 variants.
void PackedLinearF32Panels(const float* x, std::int64_t M, std::int64_t K, const float* packed, const float* bias,
                           float* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end) {
  constexpr std::int64_t kPanel = 64;
  for (std::int64_t p = p_begin; p < p_end; ++p) {
    const float* panel = packed + p * K * kPanel;
    const std::int64_t n0 = p * kPanel, cols = std::min(kPanel, N - n0);
    for (std::int64_t m0 = 0; m0 < M; m0 += 4) {
      const std::int64_t rows = std::min<std::int64_t>(4, M - m0);
      for (std::int64_t f0 = 0; f0 < cols; f0 += 16) {
        float32x4_t acc[4][4];
        for (auto& r : acc)
          for (auto& v : r) v = vdupq_n_f32(0.0f);
        for (std::int64_t k = 0; k < K; ++k) {
          const float* w = panel + k * kPanel + f0;
          const float32x4_t w0 = vld1q_f32(w), w1 = vld1q_f32(w + 4), w2 = vld1q_f32(w + 8), w3 = vld1q_f32(w + 12);
          for (std::int64_t r = 0; r < rows; ++r) {
            const float xv = x[(m0 + r) * K + k];
            acc[r][0] = vfmaq_n_f32(acc[r][0], w0, xv);
            acc[r][1] = vfmaq_n_f32(acc[r][1], w1, xv);
            acc[r][2] = vfmaq_n_f32(acc[r][2], w2, xv);
            acc[r][3] = vfmaq_n_f32(acc[r][3], w3, xv);
          }
        }
        for (std::int64_t r = 0; r < rows; ++r) {
          float sums[16];
          for (int v = 0; v < 4; ++v) vst1q_f32(sums + 4 * v, acc[r][v]);
          for (std::int64_t f = f0; f < std::min(f0 + 16, cols); ++f)
            out[(m0 + r) * N + n0 + f] = sums[f - f0] + (bias != nullptr ? bias[n0 + f] : 0.0f);
        }
      }
    }
  }
}

}  // namespace ropeserve::cpu::neon
