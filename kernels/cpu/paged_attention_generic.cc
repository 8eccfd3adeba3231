// The per-row paged attention (paged_attention_core.h) in scalar C++: the
// reference the vector variants are tested against, and what CPUs without
// them run (any head size and group). No LibTorch header, no ISA flags.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/bf16_bits.h"
#include "kernels/cpu/paged_attention_core.h"

namespace ropeserve::cpu::generic {

namespace {

inline float Get(const float* p, std::int64_t i) { return p[i]; }
inline float Get(const std::uint16_t* p, std::int64_t i) { return Bf16ToFloat(p[i]); }
inline void Put(float* p, std::int64_t i, float v) { p[i] = v; }
inline void Put(std::uint16_t* p, std::int64_t i, float v) { p[i] = FloatToBf16(v); }

template <typename T>
void Attend(const AttentionItem& it) {
  const std::int64_t D = it.head_dim, G = it.group, L = it.context_len;
  const T* q = static_cast<const T*>(it.q);
  T* out = static_cast<T*>(it.out);
  const T* kc = static_cast<const T*>(it.k_cache);
  const T* vc = static_cast<const T*>(it.v_cache);
  float* qf = it.scratch;   // [D]
  float* scores = qf + D;   // [L]
  float* acc = scores + L;  // [D]
  auto row = [&](const T* cache, std::int64_t j) {
    return cache + static_cast<std::int64_t>(it.table[j / it.block_size]) * it.block_stride +
           (j % it.block_size) * it.token_stride;
  };
  for (std::int64_t r = 0; r < it.rows; ++r) {
    const std::int64_t n_keys = L - it.rows + r + 1;  // causal
    for (std::int64_t h = 0; h < G; ++h) {
      const std::int64_t at = r * it.q_row_stride + h * D;
      for (std::int64_t d = 0; d < D; ++d) qf[d] = Get(q, at + d) * it.scale;
      float m = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < n_keys; ++j) {
        const T* k = row(kc, j);
        float s = 0.0f;
        for (std::int64_t d = 0; d < D; ++d) s = std::fma(qf[d], Get(k, d), s);
        scores[j] = s;
        m = std::max(m, s);
      }
      float sum = 0.0f;
      for (std::int64_t j = 0; j < n_keys; ++j) {
        scores[j] = std::exp(scores[j] - m);
        sum += scores[j];
      }
      std::fill(acc, acc + D, 0.0f);
      for (std::int64_t j = 0; j < n_keys; ++j) {
        const T* v = row(vc, j);
        for (std::int64_t d = 0; d < D; ++d) acc[d] = std::fma(scores[j], Get(v, d), acc[d]);
      }
      const float inv = 1.0f / sum;
      for (std::int64_t d = 0; d < D; ++d) Put(out, at + d, acc[d] * inv);
    }
  }
}

}  // namespace

bool AttendItem(const AttentionItem& it) {
  if (it.bf16)
    Attend<std::uint16_t>(it);
  else
    Attend<float>(it);
  return true;
}

}  // namespace ropeserve::cpu::generic
