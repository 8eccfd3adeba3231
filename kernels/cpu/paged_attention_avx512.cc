// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (see
// CMakeLists.txt) and only called after a run-time CPU check: the per-row
// path of kernels/cpu/paged_attention.cc for head sizes that are multiples
// of 16 up to 256. Decode rows (one query row an item) with head sizes of
// 16, 32, 64, 128 or 256 run the loops below; chunks of several rows, and
// the other head sizes, the blocked algorithm of paged_attention_blocked.h
// over 16-lane vectors, whose sums are these loops' sums in the same order
// (each key's 16 lanes reduced in _mm512_reduce_add_ps's order): a row
// gets the same bits either way. (The blocked path measured 1.3-1.4x
// slower than these loops for decode rows, up to 2x faster for chunks:
// docs/benchmarks.md, 2026-12-07.)
#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/paged_attention_blocked.h"
#include "kernels/cpu/paged_attention_core.h"

namespace ropeserve::cpu::avx512 {

namespace {

inline __m512 Load16(const float* p) { return LoadF32(p); }
inline __m512 Load16(const std::uint16_t* p) { return LoadBf16(p); }
inline void Store16(float* p, __m512 v) { StoreF32(p, v); }
inline void Store16(std::uint16_t* p, __m512 v) { StoreBf16(p, v); }

// The n scores replaced by exp(s - max); returns 1 / their sum.
float SoftmaxInPlace(float* s, std::int64_t n) {
  __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + j));
  float m = _mm512_reduce_max_ps(mx);
  for (; j < n; ++j) m = std::max(m, s[j]);
  const __m512 mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (j = 0; j < n; j += 16) {
    const __mmask16 mask = Mask16(n - j);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + j), mv));
    const __m512 em = _mm512_maskz_mov_ps(mask, e);
    _mm512_mask_storeu_ps(s + j, mask, em);
    sum = _mm512_add_ps(sum, em);
  }
  return 1.0f / _mm512_reduce_add_ps(sum);
}

// The vector operations of the blocked path (paged_attention_blocked.h).
struct Vec {
  using Reg = __m512;
  static constexpr int kLanes = 16;
  static Reg Zero() { return _mm512_setzero_ps(); }
  static Reg Set1(float v) { return _mm512_set1_ps(v); }
  static Reg Broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static Reg Load(const float* p) { return LoadF32(p); }
  static Reg Load(const std::uint16_t* p) { return LoadBf16(p); }
  static void Store(float* p, Reg v) { StoreF32(p, v); }
  static void Store(std::uint16_t* p, Reg v) { StoreBf16(p, v); }
  static Reg Fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg Mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  // Lanes i + 8 and i added, then the 128-bit halves of that: the first
  // two steps of _mm512_reduce_add_ps.
  static __m128 Quarter(Reg a) {
    const __m256 h = _mm256_add_ps(_mm512_extractf32x8_ps(a, 1), _mm512_castps512_ps256(a));
    return _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
  }
  // Its last two: (q0 + q2) + (q1 + q3), four sums at once.
  static void Sum4(Reg a0, Reg a1, Reg a2, Reg a3, float* out) {
    __m128 t0 = Quarter(a0), t1 = Quarter(a1), t2 = Quarter(a2), t3 = Quarter(a3);
    _MM_TRANSPOSE4_PS(t0, t1, t2, t3);  // t_k: lane k of each
    _mm_storeu_ps(out, _mm_add_ps(_mm_add_ps(t0, t2), _mm_add_ps(t1, t3)));
  }
  static float Softmax(float* s, std::int64_t n) { return SoftmaxInPlace(s, n); }
};

// NZ = head_dim / 16 vectors per row. Scores: one key row widened into
// registers, dotted with each query head (scaled, widened once per row).
// Probabilities times values: HC heads at a time keep HC x NZ float32 sums
// in registers while the value rows stream by once per chunk.
template <typename T, int NZ>
void Attend(const AttentionItem& it) {
  constexpr std::int64_t D = NZ * 16;
  constexpr int HC = NZ >= 16 ? 1 : 16 / NZ;
  const T* q = static_cast<const T*>(it.q);
  T* out = static_cast<T*>(it.out);
  const T* kc = static_cast<const T*>(it.k_cache);
  const T* vc = static_cast<const T*>(it.v_cache);
  const std::int64_t G = it.group, L = it.context_len;
  const std::int64_t Gp = (G + HC - 1) / HC * HC;  // padded to whole chunks (probabilities 0)
  float* qf = it.scratch;                          // [G, D]
  float* scores = qf + G * D;                      // [Gp, L]
  auto row_offset = [&](std::int64_t j) {
    return static_cast<std::int64_t>(it.table[j / it.block_size]) * it.block_stride +
           (j % it.block_size) * it.token_stride;
  };
  std::fill(scores + G * L, scores + Gp * L, 0.0f);
  for (std::int64_t r = 0; r < it.rows; ++r) {
    const std::int64_t n_keys = L - it.rows + r + 1;  // causal
    const T* qrow = q + r * it.q_row_stride;
    const __m512 scale = _mm512_set1_ps(it.scale);
    for (std::int64_t h = 0; h < G; ++h)
      for (int z = 0; z < NZ; ++z)
        _mm512_storeu_ps(qf + h * D + 16 * z, _mm512_mul_ps(Load16(qrow + h * D + 16 * z), scale));
    for (std::int64_t j = 0; j < n_keys; ++j) {
      const T* krow = kc + row_offset(j);
      __m512 k[NZ];
      for (int z = 0; z < NZ; ++z) k[z] = Load16(krow + 16 * z);
      for (std::int64_t h = 0; h < G; ++h) {
        __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(qf + h * D), k[0]);
        for (int z = 1; z < NZ; ++z) acc = _mm512_fmadd_ps(_mm512_loadu_ps(qf + h * D + 16 * z), k[z], acc);
        scores[h * L + j] = _mm512_reduce_add_ps(acc);
      }
    }
    float inv_sum[256];  // group <= 256 (AttendItem)
    for (std::int64_t h = 0; h < G; ++h) inv_sum[h] = SoftmaxInPlace(scores + h * L, n_keys);
    for (std::int64_t h0 = 0; h0 < G; h0 += HC) {
      __m512 acc[HC][NZ];
      for (int c = 0; c < HC; ++c)
        for (int z = 0; z < NZ; ++z) acc[c][z] = _mm512_setzero_ps();
      for (std::int64_t j = 0; j < n_keys; ++j) {
        const T* vrow = vc + row_offset(j);
        __m512 v[NZ];
        for (int z = 0; z < NZ; ++z) v[z] = Load16(vrow + 16 * z);
        for (int c = 0; c < HC; ++c) {
          const __m512 p = _mm512_set1_ps(scores[(h0 + c) * L + j]);
          for (int z = 0; z < NZ; ++z) acc[c][z] = _mm512_fmadd_ps(p, v[z], acc[c][z]);
        }
      }
      for (int c = 0; c < HC && h0 + c < G; ++c) {
        const __m512 inv = _mm512_set1_ps(inv_sum[h0 + c]);
        for (int z = 0; z < NZ; ++z)
          Store16(out + r * it.q_row_stride + (h0 + c) * D + 16 * z, _mm512_mul_ps(acc[c][z], inv));
      }
    }
  }
}

template <typename T>
bool AttendAs(const AttentionItem& it) {
  switch (it.head_dim) {
    case 16:
      Attend<T, 1>(it);
      return true;
    case 32:
      Attend<T, 2>(it);
      return true;
    case 64:
      Attend<T, 4>(it);
      return true;
    case 128:
      Attend<T, 8>(it);
      return true;
    case 256:
      Attend<T, 16>(it);
      return true;
    default:
      return false;
  }
}

}  // namespace

bool AttendItem(const AttentionItem& it) {
  if (it.group > 256) return false;
  if (it.rows == 1 && (it.bf16 ? AttendAs<std::uint16_t>(it) : AttendAs<float>(it))) return true;
  return AttendBlocked<Vec>(it);
}

}  // namespace ropeserve::cpu::avx512
