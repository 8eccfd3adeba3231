// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (see
// CMakeLists.txt) and only called after a run-time CPU check.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/bf16_bits.h"

namespace ropeserve::cpu::avx512 {

namespace {

// M rows of x against one weight row at a time. Each weight row is read
// front to back, so the weights form one long sequential stream that the
// hardware prefetcher follows; interleaving several rows (4 streams 2-10 KB
// apart) measured 2x slower here. Two accumulators per row of x hide the
// dot-product latency.
template <int M>
void Rows(const uint16_t* x, int64_t K, const uint16_t* w, const uint16_t* bias, uint16_t* out, int64_t N,
          int64_t n_begin, int64_t n_end) {
  const int64_t full64 = K / 64 * 64, full = K / 32 * 32;
  const __mmask32 tail_mask = K % 32 == 0 ? 0 : static_cast<__mmask32>((1ull << (K % 32)) - 1);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const uint16_t* wr = w + n * K;
    __m512 a[M], b[M];
    for (int m = 0; m < M; ++m) a[m] = b[m] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k < full64; k += 64) {
      const __m512i w0 = _mm512_loadu_si512(wr + k), w1 = _mm512_loadu_si512(wr + k + 32);
      for (int m = 0; m < M; ++m) {
        a[m] = _mm512_dpbf16_ps(a[m], (__m512bh)_mm512_loadu_si512(x + m * K + k), (__m512bh)w0);
        b[m] = _mm512_dpbf16_ps(b[m], (__m512bh)_mm512_loadu_si512(x + m * K + k + 32), (__m512bh)w1);
      }
    }
    for (; k < full; k += 32) {
      const __m512i w0 = _mm512_loadu_si512(wr + k);
      for (int m = 0; m < M; ++m) a[m] = _mm512_dpbf16_ps(a[m], (__m512bh)_mm512_loadu_si512(x + m * K + k), (__m512bh)w0);
    }
    if (tail_mask) {
      const __m512i w0 = _mm512_maskz_loadu_epi16(tail_mask, wr + full);
      for (int m = 0; m < M; ++m)
        b[m] = _mm512_dpbf16_ps(b[m], (__m512bh)_mm512_maskz_loadu_epi16(tail_mask, x + m * K + full), (__m512bh)w0);
    }
    const float bv = bias ? Bf16ToFloat(bias[n]) : 0.0f;
    for (int m = 0; m < M; ++m) out[m * N + n] = FloatToBf16(_mm512_reduce_add_ps(_mm512_add_ps(a[m], b[m])) + bv);
  }
}

}  // namespace

// Output rows [n_begin, n_end) of y[M, N].
void SmallBatchLinearRange(const uint16_t* x, int64_t M, int64_t K, const uint16_t* w, const uint16_t* bias,
                           uint16_t* out, int64_t N, int64_t n_begin, int64_t n_end) {
  // Up to 8 rows of x per pass over the weights (16 accumulators, 2 weight
  // registers and the x loads fit the 32 zmm registers). With more rows,
  // the passes run over blocks of 16 weight rows (28 KB at K = 896), so
  // only the first pass reads a block from memory and the others from L1/L2.
  constexpr int64_t kBlock = 16;
  for (int64_t nb = n_begin; nb < n_end; nb += kBlock) {
    const int64_t ne = nb + kBlock < n_end ? nb + kBlock : n_end;
    for (int64_t m0 = 0; m0 < M; m0 += 8) {
      const int64_t rows = M - m0 < 8 ? M - m0 : 8;
      const uint16_t* xs = x + m0 * K;
      uint16_t* os = out + m0 * N;
      switch (rows) {
        case 1: Rows<1>(xs, K, w, bias, os, N, nb, ne); break;
        case 2: Rows<2>(xs, K, w, bias, os, N, nb, ne); break;
        case 3: Rows<3>(xs, K, w, bias, os, N, nb, ne); break;
        case 4: Rows<4>(xs, K, w, bias, os, N, nb, ne); break;
        case 5: Rows<5>(xs, K, w, bias, os, N, nb, ne); break;
        case 6: Rows<6>(xs, K, w, bias, os, N, nb, ne); break;
        case 7: Rows<7>(xs, K, w, bias, os, N, nb, ne); break;
        default: Rows<8>(xs, K, w, bias, os, N, nb, ne); break;
      }
    }
  }
}

}  // namespace ropeserve::cpu::avx512
