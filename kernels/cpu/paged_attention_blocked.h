// The per-row paged attention (paged_attention_core.h) blocked over (row,
// head) pairs, written over an ISA's vector operations: what the AVX2
// variant runs (paged_attention_avx2.cc), and the AVX-512 variant for
// chunks of several rows (paged_attention_avx512.cc: its decode rows keep
// their own loops, faster there, with the same sums). No LibTorch header.
//
// An item's query rows pass in blocks whose (row, head) pairs share the
// key and value rows: up to kAttentionBlockPairs pairs (a decode row's
// whole GQA group; several prefill rows of it). Keys, then values, are
// widened to float32 a tile at a time (<= 16 KB, in L1) once per block,
// and two register tiles pass over them, as a small GEMM's would:
// - scores: 2 pairs x 4 keys (8 dot-product vectors, the keys' lines
//   loaded once for both pairs), each key's lanes then reduced by the
//   ISA's tree (V::Sum4), the one it used for a key alone;
// - probabilities times values: up to 6 pairs x 2 vectors of channels (12
//   sums, two value vectors, one broadcast probability), sums kept in
//   float32 between tiles.
// Every output's arithmetic is the one paged_attention_core.h gives, and
// does not depend on the block its row falls in: a score is lanes of fma
// chains over the head's channels, then that tree; a value sum is one fma
// chain over keys in order (a row's keys past its own, inside its block,
// enter with probability 0: adding 0 * v leaves the sum as it was). So a
// position gets the same bits in a prompt and in a decode step, and each
// variant the bits of its per-row loops (2026-12-07).
//
// V (the file's own type, so that every instantiation stays inside the
// file compiled with its ISA's flags) provides: Reg, kLanes; Zero, Set1,
// Broadcast(const float*), Load(const float* / const uint16_t*: widened),
// Store(float* / uint16_t*: rounded), Fma(a, b, c) = a * b + c, Mul;
// Sum4(a0, a1, a2, a3, float out[4]); and Softmax(float* s, n): the n
// scores replaced by exp(s - max), returning 1 / their sum.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cpu/paged_attention_core.h"

namespace ropeserve::cpu {

template <typename V, typename T>
class BlockedAttention {
 public:
  using Reg = typename V::Reg;
  static constexpr std::int64_t W = V::kLanes;

  // Head sizes this path takes: multiples of the vector width up to 256.
  static bool Takes(const AttentionItem& it) {
    return it.group <= kMaxPairs && it.head_dim % W == 0 && it.head_dim >= W && it.head_dim <= 256;
  }

  explicit BlockedAttention(const AttentionItem& it)
      : it_(it),
        D_(it.head_dim),
        G_(it.group),
        tile_(std::max<std::int64_t>(4, kAttentionTileFloats / it.head_dim / 4 * 4)),
        ls_((it.context_len + 3) / 4 * 4),
        block_rows_(std::clamp<std::int64_t>(kAttentionBlockPairs / it.group, 1, it.rows)) {
    const std::int64_t pairs = block_rows_ * G_;
    qf_ = it.scratch;               // [pairs, D] q * scale
    scores_ = qf_ + pairs * D_;     // [pairs, ls] scores, then probabilities
    sums_ = scores_ + pairs * ls_;  // [pairs, D] probabilities times values
    rows_ = sums_ + pairs * D_;     // [tile, D] key or value rows widened
  }

  void Run() {
    for (std::int64_t r0 = 0; r0 < it_.rows; r0 += block_rows_) Block(r0, std::min(block_rows_, it_.rows - r0));
  }

 private:
  // Pairs in a block: kAttentionBlockPairs, or one row's whole group.
  static constexpr std::int64_t kMaxPairs = 256;
  static_assert(kAttentionBlockPairs <= kMaxPairs);

  // Scores of P (1 or 2) pairs (q: float32 rows D apart) against 4 widened
  // keys (rows D apart), into s (rows ls apart, 4 columns).
  template <int P>
  static void ScoreTile(const float* q, const float* k, std::int64_t D, float* s, std::int64_t ls) {
    static_assert(P == 1 || P == 2);
    Reg a0 = V::Zero(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    const float* k1 = k + D;
    const float* k2 = k + 2 * D;
    const float* k3 = k + 3 * D;
    for (std::int64_t z = 0; z < D; z += W) {
      const Reg w0 = V::Load(k + z), w1 = V::Load(k1 + z), w2 = V::Load(k2 + z), w3 = V::Load(k3 + z);
      const Reg x = V::Load(q + z);
      a0 = V::Fma(x, w0, a0);
      a1 = V::Fma(x, w1, a1);
      a2 = V::Fma(x, w2, a2);
      a3 = V::Fma(x, w3, a3);
      if constexpr (P > 1) {
        const Reg y = V::Load(q + D + z);
        b0 = V::Fma(y, w0, b0);
        b1 = V::Fma(y, w1, b1);
        b2 = V::Fma(y, w2, b2);
        b3 = V::Fma(y, w3, b3);
      }
    }
    V::Sum4(a0, a1, a2, a3, s);
    if constexpr (P > 1) V::Sum4(b0, b1, b2, b3, s + ls);
  }

  // Sums of P (1-6) pairs x N (1 or 2) vectors of channels over nt value
  // rows (widened, rows D apart): c[m] (rows D apart) += p[m][j] * v[j];
  // p: rows lp apart. `first`: the sums start at 0.
  template <int P, int N>
  static void ValueTile(const float* p, std::int64_t lp, const float* v, std::int64_t D, std::int64_t nt, float* c,
                        bool first) {
    static_assert(P >= 1 && P <= 6 && (N == 1 || N == 2));
    Reg a[6], b[6];  // named by index only; every loop below is unrolled at compile time
    Unroll<P>([&](auto m) {
      a[m] = first ? V::Zero() : V::Load(c + m * D);
      if constexpr (N > 1) b[m] = first ? V::Zero() : V::Load(c + m * D + W);
    });
    for (std::int64_t j = 0; j < nt; ++j, v += D) {
      const Reg v0 = V::Load(v);
      const Reg v1 = N > 1 ? V::Load(v + W) : v0;
      Unroll<P>([&](auto m) {
        const Reg x = V::Broadcast(p + m * lp + j);
        a[m] = V::Fma(x, v0, a[m]);
        if constexpr (N > 1) b[m] = V::Fma(x, v1, b[m]);
      });
    }
    Unroll<P>([&](auto m) {
      V::Store(c + m * D, a[m]);
      if constexpr (N > 1) V::Store(c + m * D + W, b[m]);
    });
  }

  // f(integral_constant 0), ..., f(integral_constant P - 1).
  template <int P, typename F>
  static void Unroll(F&& f) {
    [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }
    (std::make_integer_sequence<int, P>{});
  }

  template <int N>
  static void ValueTileRows(std::int64_t pairs, const float* p, std::int64_t lp, const float* v, std::int64_t D,
                            std::int64_t nt, float* c, bool first) {
    switch (pairs) {
      case 1:
        return ValueTile<1, N>(p, lp, v, D, nt, c, first);
      case 2:
        return ValueTile<2, N>(p, lp, v, D, nt, c, first);
      case 3:
        return ValueTile<3, N>(p, lp, v, D, nt, c, first);
      case 4:
        return ValueTile<4, N>(p, lp, v, D, nt, c, first);
      case 5:
        return ValueTile<5, N>(p, lp, v, D, nt, c, first);
      default:
        return ValueTile<6, N>(p, lp, v, D, nt, c, first);
    }
  }

  const T* Row(const void* cache, std::int64_t j) const {
    return static_cast<const T*>(cache) + static_cast<std::int64_t>(it_.table[j / it_.block_size]) * it_.block_stride +
           (j % it_.block_size) * it_.token_stride;
  }

  // Keys (or values) [j0, j0 + n) of `cache` widened into rows_, then zero
  // rows up to the next multiple of 4.
  void Widen(const void* cache, std::int64_t j0, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
      const T* src = Row(cache, j0 + i);
      for (std::int64_t z = 0; z < D_; z += W) V::Store(rows_ + i * D_ + z, V::Load(src + z));
    }
    std::fill(rows_ + n * D_, rows_ + (n + 3) / 4 * 4 * D_, 0.0f);
  }

  // Rows [j0, j0 + n) of `cache` asked for while the current tile computes:
  // at long contexts they come from memory, and the widening loop alone
  // would wait for each.
  void Prefetch(const void* cache, std::int64_t j0, std::int64_t n) const {
    const std::int64_t bytes = D_ * static_cast<std::int64_t>(sizeof(T));
    for (std::int64_t i = 0; i < n; ++i) {
      const char* p = reinterpret_cast<const char*>(Row(cache, j0 + i));
      for (std::int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b);
    }
  }
  // After widening tile [j0, j0 + n) of the keys (values: `values`): the
  // next tile of the same, or the values' first after the keys' last.
  void PrefetchNext(bool values, std::int64_t j0, std::int64_t n, std::int64_t last_keys) const {
    if (j0 + n < last_keys)
      Prefetch(values ? it_.v_cache : it_.k_cache, j0 + n, std::min(tile_, last_keys - j0 - n));
    else if (!values)
      Prefetch(it_.v_cache, 0, std::min(tile_, last_keys));
  }

  // Rows [r0, r0 + nr): pair m is (row r0 + m / G, head m % G).
  void Block(std::int64_t r0, std::int64_t nr) {
    const std::int64_t pairs = nr * G_;
    const std::int64_t last_keys = it_.context_len - it_.rows + r0 + nr;  // the block's last row sees most
    const Reg scale = V::Set1(it_.scale);
    const T* q = static_cast<const T*>(it_.q);
    for (std::int64_t r = 0; r < nr; ++r)
      for (std::int64_t z = 0; z < G_ * D_; z += W)
        V::Store(qf_ + r * G_ * D_ + z, V::Mul(V::Load(q + (r0 + r) * it_.q_row_stride + z), scale));

    for (std::int64_t j0 = 0; j0 < last_keys; j0 += tile_) {
      const std::int64_t nt = std::min(tile_, last_keys - j0);
      Widen(it_.k_cache, j0, nt);
      PrefetchNext(false, j0, nt, last_keys);
      for (std::int64_t m = 0; m < pairs; m += 2)
        for (std::int64_t j = 0; j < nt; j += 4) {
          float* s = scores_ + m * ls_ + j0 + j;
          if (m + 1 < pairs)
            ScoreTile<2>(qf_ + m * D_, rows_ + j * D_, D_, s, ls_);
          else
            ScoreTile<1>(qf_ + m * D_, rows_ + j * D_, D_, s, ls_);
        }
    }
    float inv[kMaxPairs];
    for (std::int64_t m = 0; m < pairs; ++m) {
      float* s = scores_ + m * ls_;
      const std::int64_t keys = last_keys - (nr - 1 - m / G_);  // causal
      inv[m] = V::Softmax(s, keys);
      std::fill(s + keys, s + last_keys, 0.0f);
    }

    // Pairs in nearly equal tiles of at most 6 (7: 4 + 3, not 6 + 1).
    const std::int64_t tiles = (pairs + 5) / 6;
    for (std::int64_t j0 = 0; j0 < last_keys; j0 += tile_) {
      const std::int64_t nt = std::min(tile_, last_keys - j0);
      Widen(it_.v_cache, j0, nt);
      PrefetchNext(true, j0, nt, last_keys);
      for (std::int64_t t = 0; t < tiles; ++t) {
        const std::int64_t m0 = pairs * t / tiles, m1 = pairs * (t + 1) / tiles;
        const float* p = scores_ + m0 * ls_ + j0;
        std::int64_t z = 0;
        for (; z + 2 * W <= D_; z += 2 * W)
          ValueTileRows<2>(m1 - m0, p, ls_, rows_ + z, D_, nt, sums_ + m0 * D_ + z, j0 == 0);
        if (z < D_) ValueTileRows<1>(m1 - m0, p, ls_, rows_ + z, D_, nt, sums_ + m0 * D_ + z, j0 == 0);
      }
    }
    T* out = static_cast<T*>(it_.out);
    for (std::int64_t m = 0; m < pairs; ++m) {
      const Reg s = V::Set1(inv[m]);
      T* o = out + (r0 + m / G_) * it_.q_row_stride + (m % G_) * D_;
      for (std::int64_t z = 0; z < D_; z += W) V::Store(o + z, V::Mul(V::Load(sums_ + m * D_ + z), s));
    }
  }

  const AttentionItem& it_;
  // tile_: rows of a widened tile (kAttentionTileFloats / D, a multiple of
  // 4); ls_: the scores' row stride (the context rounded up to 4 keys).
  const std::int64_t D_, G_, tile_, ls_, block_rows_;
  float *qf_, *scores_, *sums_, *rows_;
};

// The item on the blocked path over V, when it takes the shape; false
// (nothing written) otherwise.
template <typename V>
bool AttendBlocked(const AttentionItem& it) {
  if (!BlockedAttention<V, float>::Takes(it)) return false;
  if (it.bf16)
    BlockedAttention<V, std::uint16_t>(it).Run();
  else
    BlockedAttention<V, float>(it).Run();
  return true;
}

}  // namespace ropeserve::cpu
