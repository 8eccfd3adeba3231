// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (see
// CMakeLists.txt) and only called after a run-time CPU check. The layout is
// described in packed_linear.h.
#include <cstdint>

#include "kernels/cpu/avx512_math.h"

namespace ropeserve::cpu::avx512 {

namespace {

constexpr std::int64_t kPanel = 64, kVecs = 4, kPairFloats = kPanel * 2;
// With one or two rows the kernel is bound by reading the weights: a
// software prefetch 8 KB ahead in the panel keeps the memory system busy
// (4, 8 and 16 KB were measured; docs/benchmarks.md).
constexpr std::int64_t kPrefetchAhead = 4096;

inline __m512bh BroadcastPair(const std::uint16_t* p) {
  std::uint32_t v;
  __builtin_memcpy(&v, p, 4);
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(v));
}

// Rows [0, R) of x against one panel over all of K: R x 4 float32 vectors
// of sums stay in registers; each step reads one pair line of the panel
// (4 x 64 bytes) and broadcasts one pair of every row. `first`: the
// panel's first row tile, which reads it from memory (the later tiles find
// it in L2) and prefetches ahead as the one- and two-row path always does.
template <int R>
void Tile(const std::uint16_t* x, std::int64_t K, const std::uint16_t* panel, const float* scale, const float* bias,
          std::uint16_t* out, std::int64_t N, std::int64_t cols, bool first) {
  __m512 acc[R][kVecs];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_setzero_ps();
  const std::int64_t pairs = K / 2;
  const std::uint16_t* wp = panel;
  std::int64_t p = 0;
  if constexpr (R <= 2) {
    // Few rows: a second set of sums over every other pair, so that eight
    // or more independent chains hide vdpbf16ps's latency.
    __m512 odd[R][kVecs];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kVecs; ++v) odd[r][v] = _mm512_setzero_ps();
    for (; p + 1 < pairs; p += 2, wp += 2 * kPairFloats) {
      for (int l = 0; l < 8; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchAhead + 32 * l), _MM_HINT_T0);
      for (int v = 0; v < kVecs; ++v) {
        const __m512bh we = (__m512bh)_mm512_loadu_si512(wp + 32 * v);
        const __m512bh wo = (__m512bh)_mm512_loadu_si512(wp + kPairFloats + 32 * v);
        for (int r = 0; r < R; ++r) {
          acc[r][v] = _mm512_dpbf16_ps(acc[r][v], BroadcastPair(x + r * K + 2 * p), we);
          odd[r][v] = _mm512_dpbf16_ps(odd[r][v], BroadcastPair(x + r * K + 2 * p + 2), wo);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_add_ps(acc[r][v], odd[r][v]);
  }
  for (; p < pairs; ++p, wp += kPairFloats) {
    if (first)
      for (int l = 0; l < 4; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchAhead + 32 * l), _MM_HINT_T0);
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(wp), w1 = (__m512bh)_mm512_loadu_si512(wp + 32);
    const __m512bh w2 = (__m512bh)_mm512_loadu_si512(wp + 64), w3 = (__m512bh)_mm512_loadu_si512(wp + 96);
    for (int r = 0; r < R; ++r) {
      const __m512bh xb = BroadcastPair(x + r * K + 2 * p);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], xb, w0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], xb, w1);
      acc[r][2] = _mm512_dpbf16_ps(acc[r][2], xb, w2);
      acc[r][3] = _mm512_dpbf16_ps(acc[r][3], xb, w3);
    }
  }
  if (K % 2 != 0) {  // the last column alone: its pair's second weight is the zero padding
    __m512bh w[kVecs];
    for (int v = 0; v < kVecs; ++v) w[v] = (__m512bh)_mm512_loadu_si512(wp + 32 * v);
    for (int r = 0; r < R; ++r) {
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[r * K + K - 1]));
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], xb, w[v]);
    }
  }
  for (int v = 0; v < kVecs && 16 * v < cols; ++v) {
    const __mmask16 mask = Mask16(cols - 16 * v);
    const __m512 b = bias != nullptr ? LoadF32(bias + 16 * v, mask) : _mm512_setzero_ps();
    if (scale != nullptr) {  // int8 panels: the per-feature scale, then the bias
      const __m512 sc = LoadF32(scale + 16 * v, mask);
      for (int r = 0; r < R; ++r) StoreBf16(out + r * N + 16 * v, _mm512_fmadd_ps(acc[r][v], sc, b), mask);
    } else {
      for (int r = 0; r < R; ++r) StoreBf16(out + r * N + 16 * v, _mm512_add_ps(acc[r][v], b), mask);
    }
  }
}

// 16 x 16 32-bit units: r[i] lane-unit j becomes r[j] unit i (unpacks of
// 32- and 64-bit units inside 128-bit lanes, then a 4 x 4 transpose of the
// lanes in two rounds of shuffle_i32x4).
inline void Transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // s[4i + j], lane L: rows 4i..4i+3 of unit 4L + j
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i x0 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88), x1 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd);
    const __m512i y0 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
    const __m512i y1 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
    t[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    t[4 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    t[8 + j] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
    t[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Features [n0, n0 + 64) of row-order int8 q [N, K] as one bfloat16 panel
// in PackWeight's order (int8 values are exact in bfloat16; the scale is
// applied to the sums): per 16 features and 16 column pairs, 16 rows of 32
// int8 widened to bfloat16 pairs, transposed so that each pair line holds
// the 16 features side by side. Zero past N and past K.
void Int8Panel(const std::int8_t* q, std::int64_t N, std::int64_t K, std::int64_t n0, std::uint16_t* panel) {
  const std::int64_t pairs = (K + 1) / 2;
  for (std::int64_t g = 0; g < kVecs; ++g) {
    const std::int64_t f0 = n0 + 16 * g, rows = N - f0 < 0 ? 0 : (N - f0 < 16 ? N - f0 : 16);
    for (std::int64_t pb = 0; pb < pairs; pb += 16) {
      const std::int64_t k0 = 2 * pb, left = K - k0;
      const __mmask32 mask = left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((std::uint64_t{1} << left) - 1);
      __m512i r[16];
      for (std::int64_t i = 0; i < 16; ++i) {
        if (i >= rows) {
          r[i] = _mm512_setzero_si512();
          continue;
        }
        const __m256i v = _mm256_maskz_loadu_epi8(mask, q + (f0 + i) * K + k0);
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(v)));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, 1)));
        r[i] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);  // columns k0..k0+31 in order
      }
      Transpose16x16(r);
      const std::int64_t lines = pairs - pb < 16 ? pairs - pb : 16;
      for (std::int64_t j = 0; j < lines; ++j) _mm512_storeu_si512(panel + (pb + j) * kPairFloats + 32 * g, r[j]);
    }
  }
}

// Features [n0, n0 + 64) of group-wise int4 weights (kernels/
// int4_weight.h's layout, K a multiple of 32) as one bfloat16 panel in
// PackWeight's order: each weight dequantized, (q - zero) * scale in
// float32, rounded to bfloat16 (the group's scale varies along K, so it
// cannot wait for the sums as int8's does). Per 16 features and 16 column
// pairs: 16 rows of 32 levels (one half of a 64-column block: its low or
// high nibbles; inside one group, as groups are multiples of 32), then
// the same transpose as Int8Panel. Zero past N.
void Int4Panel(const std::uint8_t* packed, const float* scale, const std::uint8_t* zero, std::int64_t N, std::int64_t K,
               std::int64_t group, std::int64_t n0, std::uint16_t* panel) {
  const std::int64_t pairs = K / 2, groups = K / group, row_bytes = (K + 63) / 64 * 32;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  for (std::int64_t g = 0; g < kVecs; ++g) {
    const std::int64_t f0 = n0 + 16 * g, rows = N - f0 < 0 ? 0 : (N - f0 < 16 ? N - f0 : 16);
    for (std::int64_t pb = 0; pb < pairs; pb += 16) {
      const std::int64_t k0 = 2 * pb, gi = k0 / group;
      __m512i r[16];
      for (std::int64_t i = 0; i < 16; ++i) {
        if (i >= rows) {
          r[i] = _mm512_setzero_si512();
          continue;
        }
        const std::int64_t f = f0 + i;
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + f * row_bytes + k0 / 64 * 32));
        const __m256i q = _mm256_and_si256(k0 % 64 == 0 ? b : _mm256_srli_epi16(b, 4), low4);
        const __m512i z = _mm512_set1_epi32(zero[f * groups + gi]);
        const __m512 sc = _mm512_set1_ps(scale[f * groups + gi]);
        const __m512 lo =
            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q)), z)), sc);
        const __m512 hi = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1)), z)), sc);
        r[i] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);  // columns k0..k0+31 in order
      }
      Transpose16x16(r);
      const std::int64_t lines = pairs - pb < 16 ? pairs - pb : 16;
      for (std::int64_t j = 0; j < lines; ++j) _mm512_storeu_si512(panel + (pb + j) * kPairFloats + 32 * g, r[j]);
    }
  }
}

// Every row tile of x against panel p (scale: int8 panels' float32 [N], or null).
void Panels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint16_t* panel, const float* scale,
            const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p) {
  const std::int64_t n0 = p * kPanel, cols = N - n0 < kPanel ? N - n0 : kPanel;
  const float* b = bias != nullptr ? bias + n0 : nullptr;
  const float* sc = scale != nullptr ? scale + n0 : nullptr;
  for (std::int64_t m0 = 0; m0 < M; m0 += 6) {
    const std::uint16_t* xs = x + m0 * K;
    std::uint16_t* os = out + m0 * N + n0;
    switch (M - m0 < 6 ? M - m0 : 6) {
      case 1:
        Tile<1>(xs, K, panel, sc, b, os, N, cols, m0 == 0);
        break;
      case 2:
        Tile<2>(xs, K, panel, sc, b, os, N, cols, m0 == 0);
        break;
      case 3:
        Tile<3>(xs, K, panel, sc, b, os, N, cols, m0 == 0);
        break;
      case 4:
        Tile<4>(xs, K, panel, sc, b, os, N, cols, m0 == 0);
        break;
      case 5:
        Tile<5>(xs, K, panel, sc, b, os, N, cols, m0 == 0);
        break;
      default:
        Tile<6>(xs, K, panel, sc, b, os, N, cols, m0 == 0);
        break;
    }
  }
}

}  // namespace

// Panels [p_begin, p_end) of y[M, N] (bias: float32 [N] or null).
void PackedLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint16_t* packed,
                        const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin,
                        std::int64_t p_end) {
  const std::int64_t panel_size = (K + 1) / 2 * kPairFloats;
  for (std::int64_t p = p_begin; p < p_end; ++p) Panels(x, M, K, packed + p * panel_size, nullptr, bias, out, N, p);
}

// The same over row-order int8 weights q [N, K] with float32 scales [N]:
// each panel is widened into `panel` (ceil(K / 2) * 128 values) first.
void Int8PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::int8_t* q,
                           const float* scale, const float* bias, std::uint16_t* out, std::int64_t N,
                           std::int64_t p_begin, std::int64_t p_end, std::uint16_t* panel) {
  for (std::int64_t p = p_begin; p < p_end; ++p) {
    Int8Panel(q, N, K, p * kPanel, panel);
    Panels(x, M, K, panel, scale, bias, out, N, p);
  }
}

// One int8 / int4 panel widened to bf16 pair lines (the AMX kernel's
// inputs, packed_linear_amx.cc).
void WidenInt8Panel(const std::int8_t* q, std::int64_t N, std::int64_t K, std::int64_t p, std::uint16_t* panel) {
  Int8Panel(q, N, K, p * kPanel, panel);
}
void WidenInt4Panel(const std::uint8_t* packed, const float* scale, const std::uint8_t* zero, std::int64_t N,
                    std::int64_t K, std::int64_t group, std::int64_t p, std::uint16_t* panel) {
  Int4Panel(packed, scale, zero, N, K, group, p * kPanel, panel);
}

// The same over int4 weights (Int4Panel; the scales are in the panel).
void Int4PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint8_t* packed,
                           const float* scale, const std::uint8_t* zero, std::int64_t group, const float* bias,
                           std::uint16_t* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end,
                           std::uint16_t* panel) {
  for (std::int64_t p = p_begin; p < p_end; ++p) {
    Int4Panel(packed, scale, zero, N, K, group, p * kPanel, panel);
    Panels(x, M, K, panel, nullptr, bias, out, N, p);
  }
}

}  // namespace ropeserve::cpu::avx512
