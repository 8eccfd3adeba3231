// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (see
// CMakeLists.txt) and only called after a run-time CPU check.
#include <immintrin.h>

#include <cstdint>

namespace ropeserve::cpu::avx512 {

namespace {

inline uint16_t FloatToBf16(float f) {
  // Round to nearest even, as c10::BFloat16 does (NaN stays NaN).
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float Bf16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

constexpr int kPrefetchBytes = 1024;

// M rows of x against 4 weight rows at a time: 4*M accumulators.
template <int M>
void Rows(const uint16_t* x, int64_t K, const uint16_t* w, const uint16_t* bias, uint16_t* out, int64_t N,
          int64_t n_begin, int64_t n_end) {
  const int64_t full = K / 32 * 32;
  const __mmask32 tail_mask = K % 32 == 0 ? 0 : static_cast<__mmask32>((1ull << (K % 32)) - 1);
  int64_t n = n_begin;
  for (; n + 4 <= n_end; n += 4) {
    __m512 acc[4][M];
    for (int r = 0; r < 4; ++r)
      for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
    const uint16_t* w0 = w + n * K;
    for (int64_t k = 0; k < full; k += 32) {
      __m512i wv[4];
      for (int r = 0; r < 4; ++r) {
        // Weight rows are streamed once: fetch well ahead of use.
        _mm_prefetch(reinterpret_cast<const char*>(w0 + r * K + k) + kPrefetchBytes, _MM_HINT_T0);
        wv[r] = _mm512_loadu_si512(w0 + r * K + k);
      }
      for (int m = 0; m < M; ++m) {
        const __m512i xv = _mm512_loadu_si512(x + m * K + k);
        for (int r = 0; r < 4; ++r) acc[r][m] = _mm512_dpbf16_ps(acc[r][m], (__m512bh)xv, (__m512bh)wv[r]);
      }
    }
    if (tail_mask) {
      __m512i wv[4];
      for (int r = 0; r < 4; ++r) wv[r] = _mm512_maskz_loadu_epi16(tail_mask, w0 + r * K + full);
      for (int m = 0; m < M; ++m) {
        const __m512i xv = _mm512_maskz_loadu_epi16(tail_mask, x + m * K + full);
        for (int r = 0; r < 4; ++r) acc[r][m] = _mm512_dpbf16_ps(acc[r][m], (__m512bh)xv, (__m512bh)wv[r]);
      }
    }
    for (int r = 0; r < 4; ++r) {
      const float b = bias ? Bf16ToFloat(bias[n + r]) : 0.0f;
      for (int m = 0; m < M; ++m) out[m * N + n + r] = FloatToBf16(_mm512_reduce_add_ps(acc[r][m]) + b);
    }
  }
  for (; n < n_end; ++n) {
    __m512 acc[M];
    for (int m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
    const uint16_t* wr = w + n * K;
    for (int64_t k = 0; k < full; k += 32) {
      const __m512i wv = _mm512_loadu_si512(wr + k);
      for (int m = 0; m < M; ++m)
        acc[m] = _mm512_dpbf16_ps(acc[m], (__m512bh)_mm512_loadu_si512(x + m * K + k), (__m512bh)wv);
    }
    if (tail_mask) {
      const __m512i wv = _mm512_maskz_loadu_epi16(tail_mask, wr + full);
      for (int m = 0; m < M; ++m)
        acc[m] = _mm512_dpbf16_ps(acc[m], (__m512bh)_mm512_maskz_loadu_epi16(tail_mask, x + m * K + full), (__m512bh)wv);
    }
    const float b = bias ? Bf16ToFloat(bias[n]) : 0.0f;
    for (int m = 0; m < M; ++m) out[m * N + n] = FloatToBf16(_mm512_reduce_add_ps(acc[m]) + b);
  }
}

}  // namespace

// Output rows [n_begin, n_end) of y[M, N] (M <= 8).
void SmallBatchLinearRange(const uint16_t* x, int64_t M, int64_t K, const uint16_t* w, const uint16_t* bias,
                           uint16_t* out, int64_t N, int64_t n_begin, int64_t n_end) {
  // Up to 4 rows of x per pass over the weights.
  for (int64_t m0 = 0; m0 < M; m0 += 4) {
    const int64_t rows = M - m0 < 4 ? M - m0 : 4;
    const uint16_t* xs = x + m0 * K;
    uint16_t* os = out + m0 * N;
    switch (rows) {
      case 1: Rows<1>(xs, K, w, bias, os, N, n_begin, n_end); break;
      case 2: Rows<2>(xs, K, w, bias, os, N, n_begin, n_end); break;
      case 3: Rows<3>(xs, K, w, bias, os, N, n_begin, n_end); break;
      default: Rows<4>(xs, K, w, bias, os, N, n_begin, n_end); break;
    }
  }
}

}  // namespace ropeserve::cpu::avx512
