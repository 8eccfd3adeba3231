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
//
// The second form (Int4LinearRangeInt8X, what the AVX2 table runs: its
// `int4_int8_x`): x as int8 levels per group of the weights' columns, the
// nibbles as unsigned bytes (one and, one shift + and per 64 columns, no
// widening), vpmaddubsw (32 products a vector, twice vpmaddwd's 16) into
// int16 pair sums (|sum| <= 2 * 15 * 127 each, at most four a group: <=
// 15,240, no saturation), vpmaddwd by ones into int32 once a group; the
// zero point is taken off the group's integer sum as zero * sum(x levels)
// (QuantizeGroupsInt8 keeps the sums), then one float32 multiply-add by
// the product of the two group scales. The generic file has the scalar
// reference of both forms.
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

// Int8X: a 64-column block's nibbles as two runs of 32 unsigned bytes:
// columns k..k+31 (low nibbles) and k+32..k+63 (high nibbles).
inline void Nibbles(const std::uint8_t* p, __m256i* lo, __m256i* hi) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i mask = _mm256_set1_epi8(0x0f);
  *lo = _mm256_and_si256(b, mask);
  *hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), mask);
}

inline __m256i Bytes(const std::int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// M rows of int8 x (rows Kp apart; group scales and level sums G apart)
// times weight rows [n_begin, n_end).
template <int M, typename ScaleT>
void RowsInt8X(const std::int8_t* xq, const float* xs, const std::int32_t* xsum, std::int64_t Kp,
               const std::uint8_t* packed, const ScaleT* scale, const std::uint8_t* zero, std::int64_t K,
               std::int64_t group_size, const float* bias, void* out, bool out_bf16, std::int64_t N,
               std::int64_t n_begin, std::int64_t n_end) {
  const std::int64_t G = K / group_size;
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::int64_t n = n_begin; n < n_end; ++n) {
    const std::uint8_t* pr = packed + n * (Kp / 2);
    __m256 f[M];
    for (int m = 0; m < M; ++m) f[m] = _mm256_setzero_ps();
    for (std::int64_t g = 0; g < G; ++g) {
      const std::int64_t k0 = g * group_size;
      __m256i s16[M];
      if (group_size == 32) {
        // Half a block: its low nibbles (k0 % 64 == 0) or its high ones.
        if (k0 % 128 == 0) PrefetchWeights(pr + k0 / 2);
        __m256i lo, hi;
        Nibbles(pr + k0 / 64 * 32, &lo, &hi);
        const __m256i q = k0 % 64 == 0 ? lo : hi;
        for (int m = 0; m < M; ++m) s16[m] = _mm256_maddubs_epi16(q, Bytes(xq + m * Kp + k0));
      } else {
        for (int m = 0; m < M; ++m) s16[m] = _mm256_setzero_si256();
        for (std::int64_t k = k0; k < k0 + group_size; k += 64) {
          if (k % 128 == 0) PrefetchWeights(pr + k / 2);
          __m256i lo, hi;
          Nibbles(pr + k / 2, &lo, &hi);
          for (int m = 0; m < M; ++m) {
            const std::int8_t* x = xq + m * Kp + k;
            s16[m] = _mm256_add_epi16(
                s16[m], _mm256_add_epi16(_mm256_maddubs_epi16(lo, Bytes(x)), _mm256_maddubs_epi16(hi, Bytes(x + 32))));
          }
        }
      }
      const float sw = Scale(scale + n * G + g);
      const int z = zero[n * G + g];
      for (int m = 0; m < M; ++m) {
        // sum q x - z sum x: the zero point's share taken off lane 0.
        const __m256i zx = _mm256_zextsi128_si256(_mm_cvtsi32_si128(z * xsum[m * G + g]));
        const __m256i a = _mm256_sub_epi32(_mm256_madd_epi16(s16[m], ones), zx);
        f[m] = AddGroup(f[m], a, sw * xs[m * G + g]);
      }
    }
    const float bv = bias ? bias[n] : 0.0f;
    for (int m = 0; m < M; ++m) {
      const float y = ReduceAdd(f[m]) + bv;
      if (out_bf16)
        static_cast<std::uint16_t*>(out)[m * N + n] = FloatToBf16(y);
      else
        static_cast<float*>(out)[m * N + n] = y;
    }
  }
}

template <typename ScaleT>
void RowsInt8XOf(std::int64_t rows, const std::int8_t* xq, const float* xs, const std::int32_t* xsum, std::int64_t Kp,
                 const std::uint8_t* packed, const ScaleT* scale, const std::uint8_t* zero, std::int64_t K,
                 std::int64_t group_size, const float* bias, void* out, bool out_bf16, std::int64_t N, std::int64_t nb,
                 std::int64_t ne) {
  // 4 rows a pass: 4 x 2 vectors of sums, 2 of nibbles and the constants.
  switch (rows) {
    case 1:
      return RowsInt8X<1>(xq, xs, xsum, Kp, packed, scale, zero, K, group_size, bias, out, out_bf16, N, nb, ne);
    case 2:
      return RowsInt8X<2>(xq, xs, xsum, Kp, packed, scale, zero, K, group_size, bias, out, out_bf16, N, nb, ne);
    case 3:
      return RowsInt8X<3>(xq, xs, xsum, Kp, packed, scale, zero, K, group_size, bias, out, out_bf16, N, nb, ne);
    default:
      return RowsInt8X<4>(xq, xs, xsum, Kp, packed, scale, zero, K, group_size, bias, out, out_bf16, N, nb, ne);
  }
}

}  // namespace

// Output columns [n_begin, n_end) of y [M, N], up to 4 rows of x per pass
// over a block of 16 weight rows (only the first pass reads memory), over
// a tile of x rows at a time (ForEachPass, avx2_math.h). The
// float16 scales when given (scale16 non-null), else the float32 ones.
void Int4LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp,
                     const std::uint8_t* packed, const float* scale, const std::uint16_t* scale16,
                     const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias, void* out,
                     bool out_bf16, std::int64_t N, std::int64_t n_begin, std::int64_t n_end) {
  const std::int64_t esize = out_bf16 ? 2 : 4;
  ForEachPass(M, Kp * 2, 4, n_begin, n_end, [&](std::int64_t m0, std::int64_t rows, std::int64_t nb, std::int64_t ne) {
    void* o = static_cast<char*>(out) + m0 * N * esize;
    if (scale16 != nullptr)
      RowsOf(rows, xq + m0 * Kp, xs + m0, Kp, packed, scale16, zero, K, group_size, bias, o, out_bf16, N, nb, ne);
    else
      RowsOf(rows, xq + m0 * Kp, xs + m0, Kp, packed, scale, zero, K, group_size, bias, o, out_bf16, N, nb, ne);
  });
}

// The same over int8 x per group (the header's second form).
void Int4LinearRangeInt8X(const std::int8_t* xq, const float* xs, const std::int32_t* xsum, std::int64_t M,
                          std::int64_t Kp, const std::uint8_t* packed, const float* scale, const std::uint16_t* scale16,
                          const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias,
                          void* out, bool out_bf16, std::int64_t N, std::int64_t n_begin, std::int64_t n_end) {
  const std::int64_t esize = out_bf16 ? 2 : 4, G = K / group_size;
  ForEachPass(M, Kp, 4, n_begin, n_end, [&](std::int64_t m0, std::int64_t rows, std::int64_t nb, std::int64_t ne) {
    void* o = static_cast<char*>(out) + m0 * N * esize;
    const std::int8_t* x = xq + m0 * Kp;
    if (scale16 != nullptr)
      RowsInt8XOf(rows, x, xs + m0 * G, xsum + m0 * G, Kp, packed, scale16, zero, K, group_size, bias, o, out_bf16, N,
                  nb, ne);
    else
      RowsInt8XOf(rows, x, xs + m0 * G, xsum + m0 * G, Kp, packed, scale, zero, K, group_size, bias, o, out_bf16, N, nb,
                  ne);
  });
}

// x rows as int8 levels per group of `group_size` columns (zero past K),
// each group's scale (max |x| / 127) and the sum of its levels: the
// generic QuantizeGroupsInt8's levels, bit for bit (the same float32
// product, rounded to nearest even, saturated by the packs).
void QuantizeGroupsInt8(const void* x, bool bf16, std::int64_t M, std::int64_t K, std::int64_t Kp,
                        std::int64_t group_size, std::int8_t* xq, float* scales, std::int32_t* sums) {
  const std::int64_t G = K / group_size, esize = bf16 ? 2 : 4;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  // packs work within 128-bit lanes: this puts the four runs of 8 back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (std::int64_t m = 0; m < M; ++m) {
    const char* row = static_cast<const char*>(x) + m * K * esize;
    auto load8 = [&](std::int64_t k) {
      return bf16 ? LoadBf16(reinterpret_cast<const std::uint16_t*>(row) + k)
                  : LoadF32(reinterpret_cast<const float*>(row) + k);
    };
    for (std::int64_t g = 0; g < G; ++g) {
      const std::int64_t k0 = g * group_size;
      __m256 vmax = _mm256_setzero_ps();
      for (std::int64_t k = k0; k < k0 + group_size; k += 8)
        vmax = _mm256_max_ps(vmax, _mm256_and_ps(load8(k), abs_mask));
      const float amax = ReduceMax(vmax);
      scales[m * G + g] = amax / 127.0f;
      const __m256 inv = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
      __m256i sum = _mm256_setzero_si256();
      const __m256i top = _mm256_set1_epi32(127), bottom = _mm256_set1_epi32(-128);
      for (std::int64_t k = k0; k < k0 + group_size; k += 32) {
        __m256i v[4];
        for (int i = 0; i < 4; ++i) {
          v[i] = _mm256_cvtps_epi32(_mm256_mul_ps(load8(k + 8 * i), inv));
          // The levels the packs store (only NaN or a bad scale reach past 127).
          sum = _mm256_add_epi32(sum, _mm256_max_epi32(_mm256_min_epi32(v[i], top), bottom));
        }
        const __m256i bytes = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3])), order);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + m * Kp + k), bytes);
      }
      sums[m * G + g] = ReduceAdd(sum);
    }
    for (std::int64_t k = K; k < Kp; ++k) xq[m * Kp + k] = 0;
  }
}

}  // namespace ropeserve::cpu::avx2
