// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni (see
// CMakeLists.txt) and only called after a run-time CPU check. No
// LibTorch header here: its inline functions compiled with AVX-512 could
// be the copies the linker keeps for the whole binary.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/bf16_bits.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/row_dispatch.h"

namespace ropeserve::cpu::avx512 {

namespace {

// 16 floats of row x at column k (masked: `mask` lanes), from float32 or bfloat16.
inline __m512 Load16(const void* x, bool bf16, std::int64_t k, __mmask16 mask) {
  if (bf16) {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const std::uint16_t*>(x) + k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(x) + k);
}

// Sums go to float32 every kChunk columns: per int32 lane at most
// kChunk / 64 * 2 + 2 products of |x| <= 16383 and |w| <= 127, < 2^30.
constexpr std::int64_t kChunk = 8192;

template <int M>
void Rows(const std::int16_t* xq, const float* xs, std::int64_t Kp, const std::int8_t* w, const float* ws,
          std::int64_t K, const float* bias, void* out, bool out_bf16, std::int64_t N, std::int64_t n_begin,
          std::int64_t n_end) {
  for (std::int64_t n = n_begin; n < n_end; ++n) {
    const std::int8_t* wr = w + n * K;
    __m512 f[M];
    for (int m = 0; m < M; ++m) f[m] = _mm512_setzero_ps();
    for (std::int64_t k0 = 0; k0 < K; k0 += kChunk) {
      const std::int64_t kend = k0 + kChunk < K ? k0 + kChunk : K;
      __m512i a[M], b[M];
      for (int m = 0; m < M; ++m) a[m] = b[m] = _mm512_setzero_si512();
      std::int64_t k = k0;
      for (; k + 64 <= kend; k += 64) {
        PrefetchWeights(wr + k);
        const __m512i w0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + k)));
        const __m512i w1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + k + 32)));
        for (int m = 0; m < M; ++m) {
          a[m] = _mm512_dpwssd_epi32(a[m], _mm512_loadu_si512(xq + m * Kp + k), w0);
          b[m] = _mm512_dpwssd_epi32(b[m], _mm512_loadu_si512(xq + m * Kp + k + 32), w1);
        }
      }
      for (; k < kend; k += 32) {
        // x rows are zero-padded to Kp (a multiple of 32); the weights' tail is masked.
        const std::int64_t left = kend - k;
        const __mmask32 mask = left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << left) - 1);
        const __m512i w0 = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, wr + k));
        for (int m = 0; m < M; ++m) a[m] = _mm512_dpwssd_epi32(a[m], _mm512_loadu_si512(xq + m * Kp + k), w0);
      }
      for (int m = 0; m < M; ++m) f[m] = _mm512_add_ps(f[m], _mm512_cvtepi32_ps(_mm512_add_epi32(a[m], b[m])));
    }
    const float bv = bias ? bias[n] : 0.0f;
    for (int m = 0; m < M; ++m) {
      const float y = _mm512_reduce_add_ps(f[m]) * (xs[m] * ws[n]) + bv;
      if (out_bf16)
        static_cast<std::uint16_t*>(out)[m * N + n] = FloatToBf16(y);
      else
        static_cast<float*>(out)[m * N + n] = y;
    }
  }
}

}  // namespace

void QuantizeRowsInt16(const void* x, bool bf16, std::int64_t M, std::int64_t K, std::int64_t Kp, int levels,
                       std::int16_t* xq, float* scales) {
  const std::int64_t esize = bf16 ? 2 : 4;
  for (std::int64_t m = 0; m < M; ++m) {
    const void* row = static_cast<const char*>(x) + m * K * esize;
    __m512 vmax = _mm512_setzero_ps();
    for (std::int64_t k = 0; k < K; k += 16) {
      const __mmask16 mask = K - k >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (K - k)) - 1);
      vmax = _mm512_max_ps(vmax, _mm512_abs_ps(Load16(row, bf16, k, mask)));
    }
    const float amax = _mm512_reduce_max_ps(vmax);
    scales[m] = amax / static_cast<float>(levels);
    const __m512 inv = _mm512_set1_ps(amax > 0 ? static_cast<float>(levels) / amax : 0.0f);
    std::int16_t* q = xq + m * Kp;
    for (std::int64_t k = 0; k < Kp; k += 16) {
      const std::int64_t left = K - k;
      const __mmask16 mask = left >= 16  ? __mmask16(0xffff)
                             : left <= 0 ? __mmask16(0)
                                         : static_cast<__mmask16>((1u << left) - 1);
      // Round to nearest even (the MXCSR default); |x * inv| <= levels (+ a rounding).
      const __m512i i32 = _mm512_cvtps_epi32(_mm512_mul_ps(Load16(row, bf16, k, mask), inv));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k), _mm512_cvtsepi32_epi16(i32));
    }
  }
}

// Rows [n_begin, n_end) of q [N, K] * scale as bfloat16 (round to nearest
// even, as c10::BFloat16) or float32.
void DequantizeRows(const std::int8_t* q, const float* scale, std::int64_t K, void* out, bool out_bf16,
                    std::int64_t n_begin, std::int64_t n_end) {
  for (std::int64_t n = n_begin; n < n_end; ++n) {
    const __m512 s = _mm512_set1_ps(scale[n]);
    for (std::int64_t k = 0; k < K; k += 16) {
      const __mmask16 mask = K - k >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (K - k)) - 1);
      const __m512 v =
          _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, q + n * K + k))), s);
      if (out_bf16) {
        const __m512i u = _mm512_castps_si512(v);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
        _mm256_mask_storeu_epi16(static_cast<std::uint16_t*>(out) + n * K + k, mask, _mm512_cvtepi32_epi16(r));
      } else {
        _mm512_mask_storeu_ps(static_cast<float*>(out) + n * K + k, mask, v);
      }
    }
  }
}

// Output columns [n_begin, n_end) of y[M, N].
void Int8LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp, const std::int8_t* w,
                     const float* ws, std::int64_t K, const float* bias, void* out, bool out_bf16, std::int64_t N,
                     std::int64_t n_begin, std::int64_t n_end) {
  // Up to 8 rows of x per pass over a weight row; with more rows, passes
  // over blocks of 16 weight rows so that only the first reads memory.
  constexpr std::int64_t kBlock = 16;
  const std::int64_t esize = out_bf16 ? 2 : 4;
  for (std::int64_t nb = n_begin; nb < n_end; nb += kBlock) {
    const std::int64_t ne = nb + kBlock < n_end ? nb + kBlock : n_end;
    for (std::int64_t m0 = 0; m0 < M; m0 += 8) {
      const std::int64_t rows = M - m0 < 8 ? M - m0 : 8;
      const std::int16_t* x = xq + m0 * Kp;
      const float* s = xs + m0;
      void* o = static_cast<char*>(out) + m0 * N * esize;
      DispatchRows(rows, [&](auto r) { Rows<decltype(r)::value>(x, s, Kp, w, ws, K, bias, o, out_bf16, N, nb, ne); });
    }
  }
}

}  // namespace ropeserve::cpu::avx512
