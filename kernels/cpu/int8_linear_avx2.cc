// The int8 matrix-vector kernel (kernels/cpu/int8_linear.h) and the int16
// quantization of x rows it shares with the int4 kernel, on AVX2: the
// AVX-512 kernel's arithmetic with vpmaddwd + vpaddd in place of vpdpwssd
// (int16 x int16 products summed exactly in int32, 16 a vector), 8 lanes.
// Compiled with -mavx2 -mfma -mf16c, called through the kernel table; no
// LibTorch header.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/bf16_bits.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/row_dispatch.h"

namespace ropeserve::cpu::avx2 {

namespace {

// 8 floats of row x at column k (the first n), from float32 or bfloat16.
inline __m256 Load8(const void* x, bool bf16, std::int64_t k, std::int64_t n) {
  if (bf16) return LoadBf16(static_cast<const std::uint16_t*>(x) + k, n);
  return LoadF32(static_cast<const float*>(x) + k, n);
}

// Sums go to float32 every kChunk columns: per int32 lane at most
// kChunk / 16 sums of two products of |x| <= 16383 and |w| <= 127, < 2^31.
constexpr std::int64_t kChunk = 4096;

inline __m256i Weights16(const std::int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <int M>
void Rows(const std::int16_t* xq, const float* xs, std::int64_t Kp, const std::int8_t* w, const float* ws,
          std::int64_t K, const float* bias, void* out, bool out_bf16, std::int64_t N, std::int64_t n_begin,
          std::int64_t n_end) {
  for (std::int64_t n = n_begin; n < n_end; ++n) {
    const std::int8_t* wr = w + n * K;
    __m256 f[M];
    for (int m = 0; m < M; ++m) f[m] = _mm256_setzero_ps();
    for (std::int64_t k0 = 0; k0 < K; k0 += kChunk) {
      const std::int64_t kend = k0 + kChunk < K ? k0 + kChunk : K;
      __m256i a[M];
      for (int m = 0; m < M; ++m) a[m] = _mm256_setzero_si256();
      std::int64_t k = k0;
      for (; k + 32 <= kend; k += 32) {
        if (k % 64 == 0) PrefetchWeights(wr + k);
        const __m256i w0 = Weights16(wr + k), w1 = Weights16(wr + k + 16);
        for (int m = 0; m < M; ++m) {
          const std::int16_t* xr = xq + m * Kp + k;
          const __m256i p0 = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr)), w0);
          const __m256i p1 = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + 16)), w1);
          a[m] = _mm256_add_epi32(a[m], _mm256_add_epi32(p0, p1));
        }
      }
      if (k < kend) {
        // The row's last columns: copied so that nothing past the matrix is
        // read (x rows are zero-padded to Kp, a multiple of 32).
        alignas(32) std::int8_t tail[32] = {};
        for (std::int64_t i = 0; k + i < kend; ++i) tail[i] = wr[k + i];
        const __m256i w0 = Weights16(tail), w1 = Weights16(tail + 16);
        for (int m = 0; m < M; ++m) {
          const std::int16_t* xr = xq + m * Kp + k;
          const __m256i p0 = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr)), w0);
          const __m256i p1 = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + 16)), w1);
          a[m] = _mm256_add_epi32(a[m], _mm256_add_epi32(p0, p1));
        }
      }
      for (int m = 0; m < M; ++m) f[m] = _mm256_add_ps(f[m], _mm256_cvtepi32_ps(a[m]));
    }
    const float bv = bias ? bias[n] : 0.0f;
    for (int m = 0; m < M; ++m) {
      const float y = ReduceAdd(f[m]) * (xs[m] * ws[n]) + bv;
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
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (std::int64_t m = 0; m < M; ++m) {
    const void* row = static_cast<const char*>(x) + m * K * esize;
    __m256 vmax = _mm256_setzero_ps();
    for (std::int64_t k = 0; k < K; k += 8)
      vmax = _mm256_max_ps(vmax, _mm256_and_ps(Load8(row, bf16, k, K - k), abs_mask));
    const float amax = ReduceMax(vmax);
    scales[m] = amax / static_cast<float>(levels);
    const __m256 inv = _mm256_set1_ps(amax > 0 ? static_cast<float>(levels) / amax : 0.0f);
    std::int16_t* q = xq + m * Kp;
    for (std::int64_t k = 0; k < Kp; k += 16) {
      // Round to nearest even (the MXCSR default); |x * inv| <= levels (+ a rounding).
      const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(Load8(row, bf16, k, K - k), inv));
      const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(Load8(row, bf16, k + 8, K - k - 8), inv));
      // packs works within 128-bit lanes: put the halves back in order.
      const __m256i q16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k), q16);
    }
  }
}

// Output columns [n_begin, n_end) of y[M, N]: up to 8 rows of x per pass
// over a block of 16 weight rows (only the first pass reads memory), over
// a tile of x rows at a time (ForEachPass, avx2_math.h).
void Int8LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp, const std::int8_t* w,
                     const float* ws, std::int64_t K, const float* bias, void* out, bool out_bf16, std::int64_t N,
                     std::int64_t n_begin, std::int64_t n_end) {
  const std::int64_t esize = out_bf16 ? 2 : 4;
  ForEachPass(M, Kp * 2, 8, n_begin, n_end, [&](std::int64_t m0, std::int64_t rows, std::int64_t nb, std::int64_t ne) {
    void* o = static_cast<char*>(out) + m0 * N * esize;
    DispatchRows(rows, [&](auto r) {
      Rows<decltype(r)::value>(xq + m0 * Kp, xs + m0, Kp, w, ws, K, bias, o, out_bf16, N, nb, ne);
    });
  });
}

// Rows [n_begin, n_end) of q [N, K] * scale as bfloat16 (round to nearest
// even, as c10::BFloat16) or float32.
void DequantizeRows(const std::int8_t* q, const float* scale, std::int64_t K, void* out, bool out_bf16,
                    std::int64_t n_begin, std::int64_t n_end) {
  for (std::int64_t n = n_begin; n < n_end; ++n) {
    const __m256 s = _mm256_set1_ps(scale[n]);
    for (std::int64_t k = 0; k < K; k += 8) {
      const std::int64_t left = K - k;
      __m128i bytes;
      if (left >= 8) {
        bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + n * K + k));
      } else {
        alignas(16) std::int8_t tmp[16] = {};
        for (std::int64_t i = 0; i < left; ++i) tmp[i] = q[n * K + k + i];
        bytes = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
      }
      const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), s);
      if (out_bf16)
        StoreBf16(static_cast<std::uint16_t*>(out) + n * K + k, v, left);
      else
        StoreF32(static_cast<float*>(out) + n * K + k, v, left);
    }
  }
}

}  // namespace ropeserve::cpu::avx2
