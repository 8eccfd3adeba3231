// The per-row paged attention (paged_attention_core.h) on AVX2 + FMA:
// compiled with -mavx2 -mfma -mf16c, called through the kernel table; no
// LibTorch header. The blocked algorithm (paged_attention_blocked.h) over
// 8-lane vectors; each key's 8 lanes summed as ((l0 + l1) + (l2 + l3)) +
// ((l4 + l5) + (l6 + l7)).
#include <limits>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/paged_attention_blocked.h"

namespace ropeserve::cpu::avx2 {

namespace {

struct Vec {
  using Reg = __m256;
  static constexpr int kLanes = 8;
  static Reg Zero() { return _mm256_setzero_ps(); }
  static Reg Set1(float v) { return _mm256_set1_ps(v); }
  static Reg Broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static Reg Load(const float* p) { return _mm256_loadu_ps(p); }
  static Reg Load(const std::uint16_t* p) { return LoadBf16(p); }
  static void Store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static void Store(std::uint16_t* p, Reg v) { StoreBf16(p, v); }
  static Reg Fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg Mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static void Sum4(Reg a0, Reg a1, Reg a2, Reg a3, float* out) {
    const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1)));
  }
  static float Softmax(float* s, std::int64_t n) {
    __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    std::int64_t j = 0;
    for (; j + 8 <= n; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j));
    float m = ReduceMax(mx);
    for (; j < n; ++j) m = std::max(m, s[j]);
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    for (j = 0; j < n; j += 8) {
      const std::int64_t left = n - j;
      const __m256 valid = _mm256_castsi256_ps(Mask8(left));
      const __m256 e = _mm256_and_ps(Exp(_mm256_sub_ps(LoadF32(s + j, left), mv)), valid);
      StoreF32(s + j, e, left);
      sum = _mm256_add_ps(sum, e);
    }
    return 1.0f / ReduceAdd(sum);
  }
};

}  // namespace

bool AttendItem(const AttentionItem& it) { return AttendBlocked<Vec>(it); }

}  // namespace ropeserve::cpu::avx2
