// Vector helpers for the AVX-512 kernel files (included only by *_avx512.cc,
// which are compiled with AVX-512 flags and include no LibTorch header).
// `static`: each file keeps its own copy, so the linker cannot pick one
// compiled for another file's instruction set.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ropeserve::cpu::avx512 {

[[maybe_unused]] static inline __mmask16 Mask16(std::int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

// 16 bfloat16 values widened to float32 (exact); masked lanes read nothing and are 0.
[[maybe_unused]] static inline __m512 LoadBf16(const std::uint16_t* p, __mmask16 mask = 0xffff) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
}
[[maybe_unused]] static inline __m512 LoadF32(const float* p, __mmask16 mask = 0xffff) {
  return _mm512_maskz_loadu_ps(mask, p);
}
// Rounded to bfloat16 (nearest even, as c10::BFloat16) and stored.
[[maybe_unused]] static inline void StoreBf16(std::uint16_t* p, __m512 v, __mmask16 mask = 0xffff) {
  _mm256_mask_storeu_epi16(p, mask, (__m256i)_mm512_cvtneps_pbh(v));
}
[[maybe_unused]] static inline void StoreF32(float* p, __m512 v, __mmask16 mask = 0xffff) {
  _mm512_mask_storeu_ps(p, mask, v);
}
// v rounded to bfloat16 and widened back: what storing and reloading gives.
[[maybe_unused]] static inline __m512 RoundBf16(__m512 v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(v)), 16));
}

// exp(x) within 2 ulp. Written here rather than taken from SLEEF: Debian's
// libsleef-dev would serve this machine, but the GPU machines build against
// PyTorch's LibTorch, which ships no SLEEF headers. x = n ln2 + r,
// |r| <= ln2 / 2 (ln2 split in two so that n ln2 is exact); exp(r) by its
// Taylor polynomial to degree 7 (error below 0.347^8 / 8! = 5e-9, a tenth
// of a float32 unit); 2^n by vscalefps, which also over- and underflows
// gracefully (inf, 0). NaN stays NaN.
[[maybe_unused]] static inline __m512 Exp(__m512 x) {
  // Clamped so that n stays small; NaN in the second operand passes through.
  x = _mm512_min_ps(_mm512_set1_ps(104.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln2's first 8 significant bits
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);      // ln2 - 0.693359375
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace ropeserve::cpu::avx512
