// The per-row paged attention (paged_attention_core.h) on AVX2 + FMA:
// compiled with -mavx2 -mfma -mf16c, called through the kernel table; no
// LibTorch header.
//
// Scores 8 keys at a time: the block's key rows widened once to float32,
// then per query head 8 dot-product vectors reduced together (three rounds
// of horizontal adds) instead of one horizontal sum per key. Probabilities
// times values: per head, 8 vectors (64 channels) of sums in registers
// while the value rows stream by.
#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/paged_attention_core.h"

namespace ropeserve::cpu::avx2 {

namespace {

inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const std::uint16_t* p) { return LoadBf16(p); }
inline void Store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline void Store8(std::uint16_t* p, __m256 v) { StoreBf16(p, v); }

// [sum(a[0]), ..., sum(a[7])].
inline __m256 Sum8(const __m256 a[8]) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

template <typename T>
void Attend(const AttentionItem& it) {
  const std::int64_t D = it.head_dim, NZ = D / 8;
  const T* q = static_cast<const T*>(it.q);
  T* out = static_cast<T*>(it.out);
  const T* kc = static_cast<const T*>(it.k_cache);
  const T* vc = static_cast<const T*>(it.v_cache);
  const std::int64_t G = it.group, L = it.context_len;
  float* qf = it.scratch;        // [G, D]
  float* scores = qf + G * D;    // [G, L]
  float* keys = scores + G * L;  // [8, D] a block of key rows widened
  auto row = [&](const T* cache, std::int64_t j) {
    return cache + static_cast<std::int64_t>(it.table[j / it.block_size]) * it.block_stride +
           (j % it.block_size) * it.token_stride;
  };
  const __m256 scale = _mm256_set1_ps(it.scale);
  for (std::int64_t r = 0; r < it.rows; ++r) {
    const std::int64_t n_keys = L - it.rows + r + 1;  // causal
    const T* qrow = q + r * it.q_row_stride;
    for (std::int64_t h = 0; h < G; ++h)
      for (std::int64_t z = 0; z < NZ; ++z)
        Store8(qf + h * D + 8 * z, _mm256_mul_ps(Load8(qrow + h * D + 8 * z), scale));
    for (std::int64_t j0 = 0; j0 < n_keys; j0 += 8) {
      const std::int64_t nb = std::min<std::int64_t>(8, n_keys - j0);
      for (std::int64_t i = 0; i < 8; ++i) {
        float* kr = keys + i * D;
        if (i >= nb) {
          std::fill(kr, kr + D, 0.0f);
          continue;
        }
        const T* src = row(kc, j0 + i);
        for (std::int64_t z = 0; z < NZ; ++z) Store8(kr + 8 * z, Load8(src + 8 * z));
      }
      for (std::int64_t h = 0; h < G; ++h) {
        __m256 acc[8];
        for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
        for (std::int64_t z = 0; z < NZ; ++z) {
          const __m256 qv = _mm256_loadu_ps(qf + h * D + 8 * z);
          for (int i = 0; i < 8; ++i) acc[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(keys + i * D + 8 * z), acc[i]);
        }
        StoreF32(scores + h * L + j0, Sum8(acc), nb);
      }
    }
    for (std::int64_t h = 0; h < G; ++h) {
      float* s = scores + h * L;
      __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
      std::int64_t j = 0;
      for (; j + 8 <= n_keys; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j));
      float m = ReduceMax(mx);
      for (; j < n_keys; ++j) m = std::max(m, s[j]);
      const __m256 mv = _mm256_set1_ps(m);
      __m256 sum = _mm256_setzero_ps();
      for (j = 0; j < n_keys; j += 8) {
        const std::int64_t left = n_keys - j;
        const __m256 valid = _mm256_castsi256_ps(Mask8(left));
        const __m256 e = _mm256_and_ps(Exp(_mm256_sub_ps(LoadF32(s + j, left), mv)), valid);
        StoreF32(s + j, e, left);
        sum = _mm256_add_ps(sum, e);
      }
      const __m256 inv = _mm256_set1_ps(1.0f / ReduceAdd(sum));
      for (std::int64_t z0 = 0; z0 < NZ; z0 += 8) {
        const std::int64_t nz = std::min<std::int64_t>(8, NZ - z0);
        __m256 acc[8];
        for (int z = 0; z < 8; ++z) acc[z] = _mm256_setzero_ps();
        for (std::int64_t jj = 0; jj < n_keys; ++jj) {
          const T* vrow = row(vc, jj) + 8 * z0;
          const __m256 p = _mm256_broadcast_ss(s + jj);
          for (int z = 0; z < 8; ++z)
            if (z < nz) acc[z] = _mm256_fmadd_ps(p, Load8(vrow + 8 * z), acc[z]);
        }
        for (std::int64_t z = 0; z < nz; ++z)
          Store8(out + r * it.q_row_stride + h * D + 8 * (z0 + z), _mm256_mul_ps(acc[z], inv));
      }
    }
  }
}

}  // namespace

bool AttendItem(const AttentionItem& it) {
  if (it.group > 256 || it.head_dim % 8 != 0 || it.head_dim < 8 || it.head_dim > 256) return false;
  if (it.bf16)
    Attend<std::uint16_t>(it);
  else
    Attend<float>(it);
  return true;
}

}  // namespace ropeserve::cpu::avx2
