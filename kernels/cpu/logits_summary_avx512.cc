// SummarizeRows's row (kernels/cpu/logits_summary.h: the arithmetic and
// its bound). Compiled with AVX-512 flags, called after CpuHasAvx512(); no
// LibTorch header.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/avx512_math.h"

namespace ropeserve::cpu::avx512 {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A row holding a NaN: NaN, its first NaN's id (LibTorch's max), NaN.
void NanRow(const float* x, std::int64_t n, float* lse, float* max, std::int64_t* argmax) {
  std::int64_t i = 0;
  while (i < n && !std::isnan(x[i])) ++i;
  *max = *lse = std::numeric_limits<float>::quiet_NaN();
  *argmax = i;
}

}  // namespace

void SummarizeRow(const float* x, std::int64_t n, float* lse, float* max, std::int64_t* argmax) {
  // Pass 1: each lane's max and the first position holding it; any NaN.
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 vmax = _mm512_set1_ps(-kInf);
  __m512i vidx = lanes;
  __mmask16 nan = 0;
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = Mask16(n - i);
    const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-kInf), m, x + i);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __mmask16 gt = _mm512_cmp_ps_mask(v, vmax, _CMP_GT_OQ);
    vmax = _mm512_mask_mov_ps(vmax, gt, v);
    vidx = _mm512_mask_mov_epi32(vidx, gt, _mm512_add_epi32(lanes, _mm512_set1_epi32(static_cast<int>(i))));
  }
  if (nan != 0) return NanRow(x, n, lse, max, argmax);
  const float m = _mm512_reduce_max_ps(vmax);
  // The lowest position among the lanes that reached m (a lane that never
  // rose keeps its start, < 16: it ties only when the whole row is -inf,
  // and lane 0 then gives id 0). Positions fit int32: a vocabulary does.
  const __mmask16 at_max = _mm512_cmp_ps_mask(vmax, _mm512_set1_ps(m), _CMP_EQ_OQ);
  *max = m;
  *argmax = _mm512_mask_reduce_min_epi32(at_max, vidx);
  if (std::isinf(m)) {  // +inf: the sum is inf; -inf: every entry is -inf
    *lse = m;
    return;
  }
  // Pass 2: sum exp(x - m) in float64.
  const __m512 vm = _mm512_set1_ps(m);
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 in = Mask16(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(in, x + i);
    // Lanes past the row and entries of -inf add nothing.
    const __mmask16 keep = in & _mm512_cmp_ps_mask(v, _mm512_set1_ps(-kInf), _CMP_NEQ_UQ);
    const __m512 e = _mm512_maskz_mov_ps(keep, Exp(_mm512_sub_ps(v, vm)));
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  const double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  *lse = static_cast<float>(static_cast<double>(m) + std::log(sum));
}

}  // namespace ropeserve::cpu::avx512
