// The float32 packed GEMM (packed_linear.h: panels of [K][64] float32) on
// AVX-512F: compiled with -mavx512f (and BW, VL, DQ), called through the
// kernel table; no LibTorch header. Each output is one fma chain over k in
// order from 0, + bias: the same bits as the AVX2 and generic variants
// (16 lanes instead of 8 change which outputs share a register, not the
// arithmetic of any), whatever the number of rows.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ropeserve::cpu::avx512 {

namespace {

constexpr std::int64_t kPanel = 64, kBlockK = 256, kTileRows = 6;
constexpr std::int64_t kPrefetchAhead = 2048;  // floats: 8 KB ahead in the panel

inline __mmask16 Mask(std::int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n < 0 ? 0 : n)) - 1);
}

inline void Finish(const __m512 acc[4], const float* bias, float* out, std::int64_t cols) {
  for (int v = 0; v < 4 && 16 * v < cols; ++v) {
    const __mmask16 m = Mask(cols - 16 * v);
    const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(m, bias + 16 * v) : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(out + 16 * v, m, _mm512_add_ps(acc[v], b));
  }
}

// Rows [0, R) x the panel's 64 features over kc columns of a block
// ([kc][64] floats); sums from / to c (rows 64 apart).
template <int R>
void Micro(const float* x, std::int64_t K, const float* w, std::int64_t kc, float* c, bool first) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * kPanel + 16 * v);
  for (std::int64_t k = 0; k < kc; ++k, w += kPanel) {
    const __m512 b0 = _mm512_loadu_ps(w), b1 = _mm512_loadu_ps(w + 16), b2 = _mm512_loadu_ps(w + 32),
                 b3 = _mm512_loadu_ps(w + 48);
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(x[r * K + k]);
      acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(a, b2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(a, b3, acc[r][3]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(c + r * kPanel + 16 * v, acc[r][v]);
}

void MicroRows(std::int64_t rows, const float* x, std::int64_t K, const float* w, std::int64_t kc, float* c,
               bool first) {
  switch (rows) {
    case 1:
      return Micro<1>(x, K, w, kc, c, first);
    case 2:
      return Micro<2>(x, K, w, kc, c, first);
    case 3:
      return Micro<3>(x, K, w, kc, c, first);
    case 4:
      return Micro<4>(x, K, w, kc, c, first);
    case 5:
      return Micro<5>(x, K, w, kc, c, first);
    default:
      return Micro<6>(x, K, w, kc, c, first);
  }
}

}  // namespace

void PackedLinearF32Panels(const float* x, std::int64_t M, std::int64_t K, const float* packed, const float* bias,
                           float* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end) {
  thread_local std::vector<float> sums;
  if (static_cast<std::int64_t>(sums.size()) < M * kPanel) sums.resize(static_cast<std::size_t>(M * kPanel));
  for (std::int64_t p = p_begin; p < p_end; ++p) {
    const float* panel = packed + p * K * kPanel;
    const std::int64_t n0 = p * kPanel, cols = std::min(kPanel, N - n0);
    const float* b = bias != nullptr ? bias + n0 : nullptr;
    if (M == 1) {  // one row: read the panel once, prefetching ahead
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      const float* w = panel;
      for (std::int64_t k = 0; k < K; ++k, w += kPanel) {
        for (int l = 0; l < 4; ++l)
          _mm_prefetch(reinterpret_cast<const char*>(w + kPrefetchAhead + 16 * l), _MM_HINT_T0);
        const __m512 a = _mm512_set1_ps(x[k]);
        for (int v = 0; v < 4; ++v) acc[v] = _mm512_fmadd_ps(a, _mm512_loadu_ps(w + 16 * v), acc[v]);
      }
      Finish(acc, b, out + n0, cols);
      continue;
    }
    for (std::int64_t k0 = 0; k0 < K; k0 += kBlockK) {
      const std::int64_t kc = std::min(kBlockK, K - k0);
      for (std::int64_t m0 = 0; m0 < M; m0 += kTileRows)
        MicroRows(std::min(kTileRows, M - m0), x + m0 * K + k0, K, panel + k0 * kPanel, kc, sums.data() + m0 * kPanel,
                  k0 == 0);
    }
    for (std::int64_t m = 0; m < M; ++m) {
      const float* c = sums.data() + m * kPanel;
      const __m512 acc[4] = {_mm512_loadu_ps(c), _mm512_loadu_ps(c + 16), _mm512_loadu_ps(c + 32),
                             _mm512_loadu_ps(c + 48)};
      Finish(acc, b, out + m * N + n0, cols);
    }
  }
}

}  // namespace ropeserve::cpu::avx512
