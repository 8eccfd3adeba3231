// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (see
// CMakeLists.txt) and only called after a run-time CPU check. The layout is
// described in packed_linear.h.
#include <cstdint>

#include "kernels/cpu/avx512_math.h"

namespace ropeserve::cpu::avx512 {

namespace {

constexpr int64_t kPanel = 64, kVecs = 4, kPairFloats = kPanel * 2;
// With one or two rows the kernel is bound by reading the weights: a
// software prefetch 8 KB ahead in the panel brought it level with the
// small-batch kernel's sequential row reads (measured 4, 8 and 16 KB).
constexpr int64_t kPrefetchAhead = 4096;

inline __m512bh BroadcastPair(const uint16_t* p) {
  uint32_t v;
  __builtin_memcpy(&v, p, 4);
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(v));
}

// Rows [0, R) of x against one panel over all of K: R x 4 float32 vectors
// of sums stay in registers; each step reads one pair line of the panel
// (4 x 64 bytes) and broadcasts one pair of every row.
template <int R>
void Tile(const uint16_t* x, int64_t K, const uint16_t* panel, const float* bias, uint16_t* out, int64_t N,
          int64_t cols) {
  __m512 acc[R][kVecs];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_setzero_ps();
  const int64_t pairs = K / 2;
  const uint16_t* wp = panel;
  int64_t p = 0;
  if constexpr (R <= 2) {
    // Few rows: a second set of sums over every other pair, so that eight
    // or more independent chains hide vdpbf16ps's latency.
    __m512 odd[R][kVecs];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kVecs; ++v) odd[r][v] = _mm512_setzero_ps();
    for (; p + 1 < pairs; p += 2, wp += 2 * kPairFloats) {
      for (int l = 0; l < 8; ++l) _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchAhead + 32 * l), _MM_HINT_T0);
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
    for (int r = 0; r < R; ++r) StoreBf16(out + r * N + 16 * v, _mm512_add_ps(acc[r][v], b), mask);
  }
}

}  // namespace

// Panels [p_begin, p_end) of y[M, N] (bias: float32 [N] or null).
void PackedLinearPanels(const uint16_t* x, int64_t M, int64_t K, const uint16_t* packed, const float* bias,
                        uint16_t* out, int64_t N, int64_t p_begin, int64_t p_end) {
  const int64_t panel_size = (K + 1) / 2 * kPairFloats;
  for (int64_t p = p_begin; p < p_end; ++p) {
    const uint16_t* panel = packed + p * panel_size;
    const int64_t n0 = p * kPanel, cols = N - n0 < kPanel ? N - n0 : kPanel;
    const float* b = bias != nullptr ? bias + n0 : nullptr;
    for (int64_t m0 = 0; m0 < M; m0 += 6) {
      const uint16_t* xs = x + m0 * K;
      uint16_t* os = out + m0 * N + n0;
      switch (M - m0 < 6 ? M - m0 : 6) {
        case 1: Tile<1>(xs, K, panel, b, os, N, cols); break;
        case 2: Tile<2>(xs, K, panel, b, os, N, cols); break;
        case 3: Tile<3>(xs, K, panel, b, os, N, cols); break;
        case 4: Tile<4>(xs, K, panel, b, os, N, cols); break;
        case 5: Tile<5>(xs, K, panel, b, os, N, cols); break;
        default: Tile<6>(xs, K, panel, b, os, N, cols); break;
      }
    }
  }
}

}  // namespace ropeserve::cpu::avx512
