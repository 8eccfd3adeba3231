// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni (see
// CMakeLists.txt) and only called after a run-time CPU check. No LibTorch
// header here (as int8_linear_avx512.cc). The format and the arithmetic:
// kernels/cpu/int4_linear.h.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/bf16_bits.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/row_dispatch.h"

namespace ropeserve::cpu::avx512 {

namespace {

// Columns [k, k + 64) of a weight row: 32 packed bytes -> two runs of 32
// int16 levels (the low nibbles are columns k..k+31, the high ones
// k+32..k+63).
inline void Unpack64(const std::uint8_t* p, __m512i& lo, __m512i& hi) {
  const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  lo = _mm512_and_si512(b, _mm512_set1_epi16(0x0f));
  hi = _mm512_srli_epi16(b, 4);
}

// A group's scale: float32, or float16 bits (the same value, 2 bytes fewer to read).
inline float Scale(const float* s) { return *s; }
inline float Scale(const std::uint16_t* s) { return _cvtsh_ss(*s); }

// M rows of x (int16 levels, rows Kp apart) times weight rows [n_begin, n_end).
template <int M, typename ScaleT>
void Rows(const std::int16_t* xq, const float* xs, std::int64_t Kp, const std::uint8_t* packed, const ScaleT* scale,
          const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias, void* out,
          bool out_bf16, std::int64_t N, std::int64_t n_begin, std::int64_t n_end) {
  const std::int64_t G = K / group_size;
  for (std::int64_t n = n_begin; n < n_end; ++n) {
    const std::uint8_t* pr = packed + n * (Kp / 2);
    const ScaleT* sr = scale + n * G;
    const std::uint8_t* zr = zero + n * G;
    __m512 f[M];
    for (int m = 0; m < M; ++m) f[m] = _mm512_setzero_ps();
    if (group_size == 32) {
      // Each half of a 64-column block is a group of its own.
      for (std::int64_t k = 0; k < K; k += 64) {
        if (k % 128 == 0) PrefetchWeights(pr + k / 2);  // one cache line per two blocks
        __m512i lo, hi;
        Unpack64(pr + k / 2, lo, hi);
        const std::int64_t g = k / 32;
        lo = _mm512_sub_epi16(lo, _mm512_set1_epi16(zr[g]));
        const __m512 s0 = _mm512_set1_ps(Scale(sr + g));
        for (int m = 0; m < M; ++m) {
          const __m512i a = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(xq + m * Kp + k), lo);
          f[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), s0, f[m]);
        }
        if (k + 32 >= K) break;  // K % 64 == 32: the high half is padding
        hi = _mm512_sub_epi16(hi, _mm512_set1_epi16(zr[g + 1]));
        const __m512 s1 = _mm512_set1_ps(Scale(sr + g + 1));
        for (int m = 0; m < M; ++m) {
          const __m512i a = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(xq + m * Kp + k + 32), hi);
          f[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), s1, f[m]);
        }
      }
    } else {
      // Groups of 64 or 128 columns: whole blocks; exact int32 sums per group.
      for (std::int64_t g = 0; g < G; ++g) {
        const __m512i z = _mm512_set1_epi16(zr[g]);
        __m512i a[M];
        for (int m = 0; m < M; ++m) a[m] = _mm512_setzero_si512();
        for (std::int64_t k = g * group_size; k < (g + 1) * group_size; k += 64) {
          if (k % 128 == 0) PrefetchWeights(pr + k / 2);
          __m512i lo, hi;
          Unpack64(pr + k / 2, lo, hi);
          lo = _mm512_sub_epi16(lo, z);
          hi = _mm512_sub_epi16(hi, z);
          for (int m = 0; m < M; ++m) {
            a[m] = _mm512_dpwssd_epi32(a[m], _mm512_loadu_si512(xq + m * Kp + k), lo);
            a[m] = _mm512_dpwssd_epi32(a[m], _mm512_loadu_si512(xq + m * Kp + k + 32), hi);
          }
        }
        const __m512 s = _mm512_set1_ps(Scale(sr + g));
        for (int m = 0; m < M; ++m) f[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[m]), s, f[m]);
      }
    }
    const float bv = bias ? bias[n] : 0.0f;
    for (int m = 0; m < M; ++m) {
      const float y = _mm512_reduce_add_ps(f[m]) * xs[m] + bv;
      if (out_bf16)
        static_cast<std::uint16_t*>(out)[m * N + n] = FloatToBf16(y);
      else
        static_cast<float*>(out)[m * N + n] = y;
    }
  }
}

}  // namespace

// Output columns [n_begin, n_end) of y [M, N], up to 8 rows of x per pass
// over a block of 16 weight rows (only the first pass reads memory).
// The float16 scales when given (scale16 non-null), else the float32 ones:
// the same values either way.
void Int4LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp,
                     const std::uint8_t* packed, const float* scale, const std::uint16_t* scale16,
                     const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias, void* out,
                     bool out_bf16, std::int64_t N, std::int64_t n_begin, std::int64_t n_end) {
  constexpr std::int64_t kBlock = 16;
  const std::int64_t esize = out_bf16 ? 2 : 4;
  for (std::int64_t nb = n_begin; nb < n_end; nb += kBlock) {
    const std::int64_t ne = nb + kBlock < n_end ? nb + kBlock : n_end;
    for (std::int64_t m0 = 0; m0 < M; m0 += 8) {
      const std::int64_t rows = M - m0 < 8 ? M - m0 : 8;
      const std::int16_t* x = xq + m0 * Kp;
      const float* s = xs + m0;
      void* o = static_cast<char*>(out) + m0 * N * esize;
      DispatchRows(rows, [&](auto r) {
        constexpr int R = decltype(r)::value;
        if (scale16 != nullptr)
          Rows<R>(x, s, Kp, packed, scale16, zero, K, group_size, bias, o, out_bf16, N, nb, ne);
        else
          Rows<R>(x, s, Kp, packed, scale, zero, K, group_size, bias, o, out_bf16, N, nb, ne);
      });
    }
  }
}

}  // namespace ropeserve::cpu::avx512
