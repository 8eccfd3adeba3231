// The group-wise int4 matrix-vector kernel (kernels/cpu/int4_linear.h) on
// AVX2: the AVX-512 kernel's arithmetic (x rows as int16 levels, exact
// int32 sums of (q - zero) * x per group and lane, then one float32
// multiply-add by the group's scale), 8 lanes, with vpmaddwd + vpaddd.
// Compiled with -mavx2 -mfma -mf16c, called through the kernel table; no
// LibTorch header.
//
// Per 64-column block, 32 bytes become four runs of 16 int16 levels in
// column order with no shuffle of their own: two zero-extending loads of
// 16 bytes (each word holds one byte: column j in its low nibble, j + 32
// in the high one), a mask and a shift; the group's zero point is
// subtracted from each run in int16 (q - z in [-15, 15]), once per weight
// row and shared by the rows of x of a pass. (The first version kept
// sum q x - z sum x per group and lane: a vpmulld per group and row of x
// and a buffer of sums per call; no faster, as measured, and more code.)
// The int32 sums are the same, exactly.
#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/bf16_bits.h"
#include "kernels/cpu/prefetch.h"

namespace ropeserve::cpu::avx2 {

namespace {

inline float Scale(const float* s) { return *s; }
inline float Scale(const std::uint16_t* s) { return _cvtsh_ss(*s); }

inline __m256i LoadX(const std::int16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Columns [k, k + 64) of a weight row: four runs of 16 int16 levels less
// their zero points, columns k..k+15, k+16..k+31 (the low nibbles, zero
// point z0), k+32..k+47, k+48..k+63 (z1).
inline void Unpack64(const std::uint8_t* p, int z0, int z1, __m256i q[4]) {
  const __m256i b0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i b1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  const __m256i low = _mm256_set1_epi16(0x0f);
  const __m256i zl = _mm256_set1_epi16(static_cast<std::int16_t>(z0));
  const __m256i zh = _mm256_set1_epi16(static_cast<std::int16_t>(z1));
  q[0] = _mm256_sub_epi16(_mm256_and_si256(b0, low), zl);
  q[1] = _mm256_sub_epi16(_mm256_and_si256(b1, low), zl);
  q[2] = _mm256_sub_epi16(_mm256_srli_epi16(b0, 4), zh);
  q[3] = _mm256_sub_epi16(_mm256_srli_epi16(b1, 4), zh);
}

// Row m's lanes of sum q x over columns [k, k + 32) (h = 0: runs 0, 1) or
// [k + 32, k + 64) (h = 1: runs 2, 3).
inline __m256i Half(const std::int16_t* x, const __m256i q[4], int h) {
  return _mm256_add_epi32(_mm256_madd_epi16(LoadX(x), q[2 * h]), _mm256_madd_epi16(LoadX(x + 16), q[2 * h + 1]));
}

// f += float(a) * scale, lanewise.
inline __m256 AddGroup(__m256 f, __m256i a, float scale) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_set1_ps(scale), f);
}

// M rows of x (int16 levels, rows Kp apart) times weight rows
// [n_begin, n_end).
template <int M, typename ScaleT>
void Rows(const std::int16_t* xq, const float* xs, std::int64_t Kp, const std::uint8_t* packed, const ScaleT* scale,
          const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias, void* out,
          bool out_bf16, std::int64_t N, std::int64_t n_begin, std::int64_t n_end) {
  const std::int64_t G = K / group_size;
  for (std::int64_t n = n_begin; n < n_end; ++n) {
    const std::uint8_t* pr = packed + n * (Kp / 2);
    const ScaleT* sr = scale + n * G;
    const std::uint8_t* zr = zero + n * G;
    __m256 f[M];
    for (int m = 0; m < M; ++m) f[m] = _mm256_setzero_ps();
    if (group_size == 32) {
      // Each half of a 64-column block is a group of its own.
      for (std::int64_t k = 0; k < K; k += 64) {
        if (k % 128 == 0) PrefetchWeights(pr + k / 2);
        const std::int64_t g = k / 32;
        const bool high = k + 32 < K;  // K % 64 == 32: the last block's high half is padding
        __m256i q[4];
        Unpack64(pr + k / 2, zr[g], high ? zr[g + 1] : 0, q);
        for (int m = 0; m < M; ++m) {
          const std::int16_t* x = xq + m * Kp + k;
          f[m] = AddGroup(f[m], Half(x, q, 0), Scale(sr + g));
          if (high) f[m] = AddGroup(f[m], Half(x + 32, q, 1), Scale(sr + g + 1));
        }
      }
    } else {
      // Groups of 64 or 128 columns: whole blocks.
      for (std::int64_t g = 0; g < G; ++g) {
        __m256i a[M];
        for (int m = 0; m < M; ++m) a[m] = _mm256_setzero_si256();
        for (std::int64_t k = g * group_size; k < (g + 1) * group_size; k += 64) {
          if (k % 128 == 0) PrefetchWeights(pr + k / 2);
          __m256i q[4];
          Unpack64(pr + k / 2, zr[g], zr[g], q);
          for (int m = 0; m < M; ++m) {
            const std::int16_t* x = xq + m * Kp + k;
            a[m] = _mm256_add_epi32(a[m], _mm256_add_epi32(Half(x, q, 0), Half(x + 32, q, 1)));
          }
        }
        const float s = Scale(sr + g);
        for (int m = 0; m < M; ++m) f[m] = AddGroup(f[m], a[m], s);
      }
    }
    const float bv = bias ? bias[n] : 0.0f;
    for (int m = 0; m < M; ++m) {
      const float y = ReduceAdd(f[m]) * xs[m] + bv;
      if (out_bf16)
        static_cast<std::uint16_t*>(out)[m * N + n] = FloatToBf16(y);
      else
        static_cast<float*>(out)[m * N + n] = y;
    }
  }
}

template <typename ScaleT>
void RowsOf(std::int64_t rows, const std::int16_t* xq, const float* xs, std::int64_t Kp, const std::uint8_t* packed,
            const ScaleT* scale, const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias,
            void* out, bool out_bf16, std::int64_t N, std::int64_t nb, std::int64_t ne) {
  // At most 4 rows a pass: 4 x 2 vectors of sums and 4 of levels fill the
  // 16 registers.
  switch (rows) {
    case 1:
      return Rows<1>(xq, xs, Kp, packed, scale, zero, K, group_size, bias, out, out_bf16, N, nb, ne);
    case 2:
      return Rows<2>(xq, xs, Kp, packed, scale, zero, K, group_size, bias, out, out_bf16, N, nb, ne);
    case 3:
      return Rows<3>(xq, xs, Kp, packed, scale, zero, K, group_size, bias, out, out_bf16, N, nb, ne);
    default:
      return Rows<4>(xq, xs, Kp, packed, scale, zero, K, group_size, bias, out, out_bf16, N, nb, ne);
  }
}

}  // namespace

// Output columns [n_begin, n_end) of y [M, N], up to 4 rows of x per pass
// over a block of 16 weight rows (only the first pass reads memory). The
// float16 scales when given (scale16 non-null), else the float32 ones.
void Int4LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp,
                     const std::uint8_t* packed, const float* scale, const std::uint16_t* scale16,
                     const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias, void* out,
                     bool out_bf16, std::int64_t N, std::int64_t n_begin, std::int64_t n_end) {
  constexpr std::int64_t kBlock = 16, kRows = 4;
  const std::int64_t esize = out_bf16 ? 2 : 4;
  for (std::int64_t nb = n_begin; nb < n_end; nb += kBlock) {
    const std::int64_t ne = nb + kBlock < n_end ? nb + kBlock : n_end;
    for (std::int64_t m0 = 0; m0 < M; m0 += kRows) {
      const std::int64_t rows = M - m0 < kRows ? M - m0 : kRows;
      void* o = static_cast<char*>(out) + m0 * N * esize;
      if (scale16 != nullptr)
        RowsOf(rows, xq + m0 * Kp, xs + m0, Kp, packed, scale16, zero, K, group_size, bias, o, out_bf16, N, nb, ne);
      else
        RowsOf(rows, xq + m0 * Kp, xs + m0, Kp, packed, scale, zero, K, group_size, bias, o, out_bf16, N, nb, ne);
    }
  }
}

}  // namespace ropeserve::cpu::avx2
