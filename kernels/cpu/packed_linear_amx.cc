// Compiled with -mamx-tile -mamx-bf16 and the AVX-512 flags (see
// CMakeLists.txt) and only called after CpuHasAmxBf16(). No LibTorch header
// (as the other *_avx512.cc files).
//
// The packed GEMM (packed_linear.h) on AMX tiles, over the same panels: a
// panel's pair lines are 256 bytes, 64 features x (w[n][k], w[n][k+1]),
// which is TDPBF16PS's B layout for 16 features when read with a 256-byte
// stride; x rows are its A tiles. 32 rows x 32 features of float32 sums
// live in four C tiles over all of K (bf16 products, float32 sums: the
// same arithmetic as vdpbf16ps, in another order), then the bias (and an
// int8 panel's per-feature scale) and one rounding to bfloat16.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/avx512_math.h"

namespace ropeserve::cpu {
namespace avx512 {
// packed_linear_avx512.cc: one int8 / int4 panel widened to bf16 pair lines.
void WidenInt8Panel(const std::int8_t* q, std::int64_t N, std::int64_t K, std::int64_t p, std::uint16_t* panel);
void WidenInt4Panel(const std::uint8_t* packed, const float* scale, const std::uint8_t* zero, std::int64_t N,
                    std::int64_t K, std::int64_t group, std::int64_t p, std::uint16_t* panel);
}  // namespace avx512

namespace amx {

namespace {

constexpr std::int64_t kPanel = 64, kPairLine = kPanel * 2;  // uint16 per pair line

struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// Tiles 0-3: C (16 x 16 float32); 4, 5: A (16 rows x 32 bf16 of x);
// 6, 7: B (16 pair lines x 16 features).
void LoadConfig() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
}

// Rows [m0, m0 + 32) of the padded x against features [f0, f0 + 32) of one
// panel, over all of K (a multiple of 32); the sums to c[32][32].
void Block(const std::uint16_t* x, std::int64_t K, const std::uint16_t* panel, std::int64_t f0, float* c) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const std::int64_t xs = K * 2;  // bytes between rows of x
  for (std::int64_t k = 0; k < K; k += 32) {
    const std::uint16_t* b = panel + (k / 2) * kPairLine + f0 * 2;
    _tile_loadd(4, x + k, xs);
    _tile_loadd(5, x + 16 * K + k, xs);
    _tile_loadd(6, b, kPairLine * 2);
    _tile_loadd(7, b + 32, kPairLine * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 128);
  _tile_stored(1, c + 16, 128);
  _tile_stored(2, c + 16 * 32, 128);
  _tile_stored(3, c + 16 * 32 + 16, 128);
}

// Panels [p_begin, p_end) of y [M, N] (bf16). x: [Mp, K] bf16 with Mp = M
// rounded up to 32, rows past M zero; K a multiple of 32. `panel_of(p)`
// gives panel p's pair lines (a packed weight's, or one widened into a
// scratch panel); scale: float32 [N] (int8 panels) or null; bias: float32
// [N] or null.
template <typename PanelOf>
void Panels(const std::uint16_t* x, std::int64_t M, std::int64_t K, PanelOf&& panel_of, const float* scale,
            const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end) {
  LoadConfig();
  alignas(64) float c[32 * 32];
  for (std::int64_t p = p_begin; p < p_end; ++p) {
    const std::uint16_t* panel = panel_of(p);
    for (std::int64_t m0 = 0; m0 < M; m0 += 32) {
      for (std::int64_t f0 = 0; f0 < kPanel; f0 += 32) {
        const std::int64_t n0 = p * kPanel + f0;
        if (n0 >= N) break;
        Block(x + m0 * K, K, panel, f0, c);
        const std::int64_t rows = M - m0 < 32 ? M - m0 : 32;
        for (std::int64_t h = 0; h < 32 && n0 + h < N; h += 16) {
          const __mmask16 mask = avx512::Mask16(N - n0 - h);
          const __m512 b = bias != nullptr ? avx512::LoadF32(bias + n0 + h, mask) : _mm512_setzero_ps();
          const __m512 s = scale != nullptr ? avx512::LoadF32(scale + n0 + h, mask) : _mm512_set1_ps(1.0f);
          for (std::int64_t r = 0; r < rows; ++r) {
            const __m512 v = _mm512_load_ps(c + r * 32 + h);
            avx512::StoreBf16(out + (m0 + r) * N + n0 + h,
                              scale != nullptr ? _mm512_fmadd_ps(v, s, b) : _mm512_add_ps(v, b), mask);
          }
        }
      }
    }
  }
  _tile_release();
}

}  // namespace

void PackedLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint16_t* packed,
                        const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin,
                        std::int64_t p_end) {
  const std::int64_t panel_size = K / 2 * kPairLine;
  Panels(
      x, M, K, [&](std::int64_t p) { return packed + p * panel_size; }, nullptr, bias, out, N, p_begin, p_end);
}

// Over int8 weights q [N, K] (scales [N]) and int4 weights
// (int4_linear.h): each panel widened into `panel` (K / 2 pair lines)
// first, as the AVX-512 panel paths do.
void Int8PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::int8_t* q,
                           const float* scale, const float* bias, std::uint16_t* out, std::int64_t N,
                           std::int64_t p_begin, std::int64_t p_end, std::uint16_t* panel) {
  Panels(
      x, M, K,
      [&](std::int64_t p) {
        avx512::WidenInt8Panel(q, N, K, p, panel);
        return static_cast<const std::uint16_t*>(panel);
      },
      scale, bias, out, N, p_begin, p_end);
}

void Int4PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint8_t* packed,
                           const float* scale, const std::uint8_t* zero, std::int64_t group, const float* bias,
                           std::uint16_t* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end,
                           std::uint16_t* panel) {
  Panels(
      x, M, K,
      [&](std::int64_t p) {
        avx512::WidenInt4Panel(packed, scale, zero, N, K, group, p, panel);
        return static_cast<const std::uint16_t*>(panel);
      },
      nullptr, bias, out, N, p_begin, p_end);
}

}  // namespace amx
}  // namespace ropeserve::cpu
