// SummarizeRows's row (kernels/cpu/logits_summary.h: the arithmetic and
// its bound) on AVX2: the AVX-512 row's two passes with 8 lanes. Compiled
// with -mavx2 -mfma -mf16c, called through the kernel table; no LibTorch
// header.
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/avx2_math.h"

namespace ropeserve::cpu::avx2 {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

void NanRow(const float* x, std::int64_t n, float* lse, float* max, std::int64_t* argmax) {
  std::int64_t i = 0;
  while (i < n && !std::isnan(x[i])) ++i;
  *max = *lse = std::numeric_limits<float>::quiet_NaN();
  *argmax = i;
}

// The first n (0-8) lanes of x; -inf in the others.
inline __m256 LoadOrMinusInf(const float* x, std::int64_t n) {
  if (n >= 8) return _mm256_loadu_ps(x);
  return _mm256_blendv_ps(_mm256_set1_ps(-kInf), _mm256_maskload_ps(x, Mask8(n)), _mm256_castsi256_ps(Mask8(n)));
}

}  // namespace

void SummarizeRow(const float* x, std::int64_t n, float* lse, float* max, std::int64_t* argmax) {
  // Pass 1: each lane's max and the first position holding it; any NaN.
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 vmax = _mm256_set1_ps(-kInf);
  __m256i vidx = lanes;
  __m256 nan = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < n; i += 8) {
    const __m256 v = LoadOrMinusInf(x + i, n - i);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256 gt = _mm256_cmp_ps(v, vmax, _CMP_GT_OQ);
    vmax = _mm256_blendv_ps(vmax, v, gt);
    vidx = _mm256_blendv_epi8(vidx, _mm256_add_epi32(lanes, _mm256_set1_epi32(static_cast<int>(i))),
                              _mm256_castps_si256(gt));
  }
  if (_mm256_movemask_ps(nan) != 0) return NanRow(x, n, lse, max, argmax);
  const float m = ReduceMax(vmax);
  // The lowest position among the lanes that reached m (see the AVX-512 row).
  alignas(32) float lane_max[8];
  alignas(32) std::int32_t lane_idx[8];
  _mm256_store_ps(lane_max, vmax);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lane_idx), vidx);
  std::int32_t best = std::numeric_limits<std::int32_t>::max();
  for (int l = 0; l < 8; ++l)
    if (lane_max[l] == m && lane_idx[l] < best) best = lane_idx[l];
  *max = m;
  *argmax = best;
  if (std::isinf(m)) {
    *lse = m;
    return;
  }
  // Pass 2: sum exp(x - m) in float64.
  const __m256 vm = _mm256_set1_ps(m);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  for (std::int64_t i = 0; i < n; i += 8) {
    const std::int64_t left = n - i;
    const __m256 v = LoadOrMinusInf(x + i, left);
    // Lanes past the row and entries of -inf add nothing.
    const __m256 keep = _mm256_cmp_ps(v, _mm256_set1_ps(-kInf), _CMP_NEQ_UQ);
    const __m256 e = _mm256_and_ps(keep, Exp(_mm256_sub_ps(v, vm)));
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  const __m256d s = _mm256_add_pd(s0, s1);
  alignas(32) double parts[4];
  _mm256_store_pd(parts, s);
  const double sum = (parts[0] + parts[1]) + (parts[2] + parts[3]);
  *lse = static_cast<float>(static_cast<double>(m) + std::log(sum));
}

}  // namespace ropeserve::cpu::avx2
