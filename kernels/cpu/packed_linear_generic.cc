// The scalar variants of the packed GEMM and its int8 / int4 panel paths
// (kernels/cpu/packed_linear.h): the reference the vector variants are
// tested against, and what `--kernel-isa generic` runs. Plain C++, no
// LibTorch header, no ISA flags (builds for any target, aarch64 included).
//
// Arithmetic, as the AVX2 and NEON variants': each output is one chain of
// fused multiply-adds over k in order from 0 (std::fma: one rounding a
// step), then + bias (int8: fma(sum, scale, bias)), rounded to bfloat16.
// The float32 panels: the same chain, + bias, in every ISA's variant.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/bf16_bits.h"

namespace ropeserve::cpu::generic {

namespace {

constexpr std::int64_t kPanelF32 = 64;

constexpr std::int64_t kPanel = 64;

// y[m][n0 + f] for the 64 features of one panel, weight(f, k) giving the
// panel's weight of feature f at column k as float32.
template <typename Weight>
void Panel(const std::uint16_t* x, std::int64_t M, std::int64_t K, const Weight& weight, const float* scale,
           const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p) {
  const std::int64_t n0 = p * kPanel, cols = std::min(kPanel, N - n0);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t f = 0; f < cols; ++f) {
      float acc = 0.0f;
      for (std::int64_t k = 0; k < K; ++k) acc = std::fma(Bf16ToFloat(x[m * K + k]), weight(f, k), acc);
      const float b = bias != nullptr ? bias[n0 + f] : 0.0f;
      out[m * N + n0 + f] = FloatToBf16(scale != nullptr ? std::fma(acc, scale[n0 + f], b) : acc + b);
    }
}

}  // namespace

void PackedLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint16_t* packed,
                        const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin,
                        std::int64_t p_end) {
  const std::int64_t panel_size = (K + 1) / 2 * kPanel * 2;
  for (std::int64_t p = p_begin; p < p_end; ++p) {
    const std::uint16_t* panel = packed + p * panel_size;
    // Pair line k / 2 holds (w[f][k], w[f][k + 1]) for the 64 features.
    Panel(
        x, M, K, [&](std::int64_t f, std::int64_t k) { return Bf16ToFloat(panel[(k / 2 * kPanel + f) * 2 + k % 2]); },
        nullptr, bias, out, N, p);
  }
}

void Int8PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::int8_t* q,
                           const float* scale, const float* bias, std::uint16_t* out, std::int64_t N,
                           std::int64_t p_begin, std::int64_t p_end) {
  for (std::int64_t p = p_begin; p < p_end; ++p)
    Panel(
        x, M, K, [&](std::int64_t f, std::int64_t k) { return static_cast<float>(q[(p * kPanel + f) * K + k]); }, scale,
        bias, out, N, p);
}

void Int4PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint8_t* packed,
                           const float* scale, const std::uint8_t* zero, std::int64_t group, const float* bias,
                           std::uint16_t* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end) {
  const std::int64_t row_bytes = (K + 63) / 64 * 32, groups = K / group;
  for (std::int64_t p = p_begin; p < p_end; ++p)
    Panel(
        x, M, K,
        [&](std::int64_t f, std::int64_t k) {
          const std::int64_t n = p * kPanel + f, g = n * groups + k / group;
          const std::uint8_t byte = packed[n * row_bytes + k / 64 * 32 + k % 32];
          const int level = k % 64 < 32 ? byte & 15 : byte >> 4;
          // (q - zero) * scale rounded to bfloat16, as every panel path does.
          return Bf16ToFloat(FloatToBf16(static_cast<float>(level - zero[g]) * scale[g]));
        },
        nullptr, bias, out, N, p);
}

}  // namespace ropeserve::cpu::generic

namespace ropeserve::cpu::generic {

// Float32 panels ([K][64] float32 each, packed_linear.h): the same fma
// chain per output, float32 out.
void PackedLinearF32Panels(const float* x, std::int64_t M, std::int64_t K, const float* packed, const float* bias,
                           float* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end) {
  for (std::int64_t p = p_begin; p < p_end; ++p) {
    const float* panel = packed + p * K * kPanelF32;
    const std::int64_t n0 = p * kPanelF32, cols = std::min(kPanelF32, N - n0);
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t f = 0; f < cols; ++f) {
        float acc = 0.0f;
        for (std::int64_t k = 0; k < K; ++k) acc = std::fma(x[m * K + k], panel[k * kPanelF32 + f], acc);
        out[m * N + n0 + f] = acc + (bias != nullptr ? bias[n0 + f] : 0.0f);
      }
  }
}

}  // namespace ropeserve::cpu::generic
