// Vector helpers for the AVX2 kernel files (*_avx2.cc, compiled with
// -mavx2 -mfma -mf16c and no LibTorch header; called only after the
// run-time dispatch chose AVX2 or better, kernels/cpu/cpu_features.h).
// `static`: each file keeps its own copy, so the linker cannot pick one
// compiled for another file's instruction set.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ropeserve::cpu::avx2 {

// 8 bfloat16 values widened to float32 (exact).
[[maybe_unused]] static inline __m256 LoadBf16(const std::uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
// The first `n` (0-8) of them; the other lanes 0.
[[maybe_unused]] static inline __m256 LoadBf16(const std::uint16_t* p, std::int64_t n) {
  if (n >= 8) return LoadBf16(p);
  alignas(16) std::uint16_t tmp[8] = {};
  for (std::int64_t i = 0; i < n; ++i) tmp[i] = p[i];
  return LoadBf16(tmp);
}

// The lanes of `n` (0-8) leading ones, for maskload / maskstore.
[[maybe_unused]] static inline __m256i Mask8(std::int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n < 8 ? n : 8)), lanes);
}
[[maybe_unused]] static inline __m256 LoadF32(const float* p) { return _mm256_loadu_ps(p); }
[[maybe_unused]] static inline __m256 LoadF32(const float* p, std::int64_t n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, Mask8(n));
}
[[maybe_unused]] static inline void StoreF32(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
[[maybe_unused]] static inline void StoreF32(float* p, __m256 v, std::int64_t n) {
  if (n >= 8)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, Mask8(n), v);
}

// float32 -> bfloat16 bits in the 32-bit lanes' low halves, rounded to
// nearest even as c10::BFloat16 does (NaN becomes 0x7fc0).
[[maybe_unused]] static inline __m256i RoundToBf16Bits(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(nan));
}
// v rounded to bfloat16 and widened back: what storing and reloading gives.
[[maybe_unused]] static inline __m256 RoundBf16(__m256 v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(RoundToBf16Bits(v), 16));
}
// Rounded to bfloat16 and stored (8 values, or the first n).
[[maybe_unused]] static inline void StoreBf16(std::uint16_t* p, __m256 v, std::int64_t n = 8) {
  const __m256i r = RoundToBf16Bits(v);
  // Pack the 32-bit lanes' low halves (each < 2^16): packus works within
  // 128-bit lanes, so the halves are put back in order first.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
  const __m128i h = _mm256_castsi256_si128(packed);
  if (n >= 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
    return;
  }
  alignas(16) std::uint16_t tmp[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(tmp), h);
  for (std::int64_t i = 0; i < n; ++i) p[i] = tmp[i];
}

[[maybe_unused]] static inline float ReduceAdd(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
[[maybe_unused]] static inline float ReduceMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
[[maybe_unused]] static inline std::int32_t ReduceAdd(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// exp(x) within 2 ulp: the arithmetic of avx512_math.h's Exp (x = n ln2 +
// r, the degree-7 Taylor polynomial of exp(r)) with 2^n made from the
// exponent bits in two halves, 2^(n/2) * 2^(n - n/2), since AVX2 has no
// vscalefps and |n| reaches 150 after the clamp; each half is a normal
// float, so the two products overflow to inf and underflow towards 0 as
// one would (below 2^-126 they may round twice: values a softmax sum
// cannot see). NaN stays NaN.
[[maybe_unused]] static inline __m256 Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(104.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n);  // NaN: 0x80000000, and p is NaN anyway
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// The loop nest of the int8 / int4 matrix-vector kernels: x in tiles of
// ~128 KB (`row_bytes` a row), each block of kBlock weight rows of
// [n_begin, n_end) passed over a tile's rows `step` at a time, so that the
// tile stays in L2 while every block passes over it (without the tiles,
// past a few hundred rows x streamed from L3 once per block: the int16
// kernels fell from ~195 to ~155 GFLOP/s between 16 and 2048 rows).
// pass(m0, rows, nb, ne): rows [m0, m0 + rows) of x by weight rows [nb, ne).
template <typename Pass>
static inline void ForEachPass(std::int64_t M, std::int64_t row_bytes, std::int64_t step, std::int64_t n_begin,
                               std::int64_t n_end, Pass&& pass) {
  constexpr std::int64_t kBlock = 16;
  const std::int64_t fit = (std::int64_t{128} << 10) / row_bytes / step * step;
  const std::int64_t tile = fit > step ? fit : step;
  for (std::int64_t mt = 0; mt < M; mt += tile) {
    const std::int64_t mend = mt + tile < M ? mt + tile : M;
    for (std::int64_t nb = n_begin; nb < n_end; nb += kBlock) {
      const std::int64_t ne = nb + kBlock < n_end ? nb + kBlock : n_end;
      for (std::int64_t m0 = mt; m0 < mend; m0 += step) pass(m0, mend - m0 < step ? mend - m0 : step, nb, ne);
    }
  }
}

}  // namespace ropeserve::cpu::avx2
