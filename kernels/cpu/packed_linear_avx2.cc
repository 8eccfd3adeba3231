// The packed GEMM (kernels/cpu/packed_linear.h: panels of 64 output
// features, (w[n][k], w[n][k+1]) pairs side by side) on AVX2 + FMA, and
// the int8 / int4 panel paths beside it. Compiled with -mavx2 -mfma -mf16c
// (CMakeLists.txt), called through the kernel table (kernel_table.h) only
// on CPUs that have them; no LibTorch header.
//
// Arithmetic: every output is one chain of fused multiply-adds over k in
// order, from 0: acc = fma(x[k], w[k], acc) (bfloat16 products are exact
// in float32, so each step rounds once), then acc + bias (int8:
// fma(acc, scale, bias)) rounded to bfloat16. The same chain whatever the
// number of rows, the tile a row falls in or the thread: a row's result
// does not depend on the batch, and it equals the generic variant's
// (packed_linear_generic.cc, std::fma in the same order) bit for bit.
//
// How: one or two rows (batch-1 and small-batch decode) read each pair
// line of a panel once, widen its 32-byte runs to float32 in registers (a
// shift for w[n][k], a mask for w[n][k+1]) and keep 8 vectors of sums; it
// is bound by reading the weights. More rows (batched decode, prefill):
// blocks of kBlockK columns of a panel are widened once to float32 (a 64 KB
// block, in L2), and a 6 x 16 register tile (12 accumulators, two weight
// vectors, one broadcast of x) passes over them: the shape of an AVX2
// SGEMM micro-kernel, with sums kept in a float32 buffer between blocks.
// int8 and int4 panels are widened the same way from their own layouts
// (int4: each weight (q - zero) * scale rounded to bfloat16 first, as the
// AVX-512 panel path does).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/avx2_math.h"

namespace ropeserve::cpu::avx2 {

namespace {

constexpr std::int64_t kPanel = 64, kPairLine = kPanel * 2;  // uint16 per pair line
// Columns per widened block: 256 x 64 float32 = 64 KB.
constexpr std::int64_t kBlockK = 256;
// Up to this many rows read the packed panel directly.
constexpr std::int64_t kDirectMaxRows = 2;
constexpr std::int64_t kTileRows = 6;
// A software prefetch this many uint16 ahead in the panel (8 KB), as the
// AVX-512 kernel's (the VMs' hardware prefetchers leave a single stream
// short of the bandwidth).
constexpr std::int64_t kPrefetchAhead = 4096;
// The next block is fetched into L1 (T0): to L2 (T1) measured the same or
// slower (docs/benchmarks.md).
constexpr auto kNextBlockHint = _MM_HINT_T0;

inline __m256 Even(__m256i u) { return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16)); }
inline __m256 Odd(__m256i u) { return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32(-65536))); }
inline float Bf16(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// The sums of one output row for 8 x V features (V vectors), finished:
// + bias (or fma with the int8 scale), stored (rounded to bfloat16, or as
// float32).
inline void Store(std::uint16_t* p, __m256 v, std::int64_t n) { StoreBf16(p, v, n); }
inline void Store(float* p, __m256 v, std::int64_t n) { StoreF32(p, v, n); }
template <int V, typename Out>
inline void Finish(const __m256* acc, const float* scale, const float* bias, Out* out, std::int64_t cols) {
  for (int v = 0; v < V && 8 * v < cols; ++v) {
    const std::int64_t n = cols - 8 * v;
    const __m256 b = bias != nullptr ? LoadF32(bias + 8 * v, n) : _mm256_setzero_ps();
    const __m256 y =
        scale != nullptr ? _mm256_fmadd_ps(acc[v], LoadF32(scale + 8 * v, n), b) : _mm256_add_ps(acc[v], b);
    Store(out + 8 * v, y, n);
  }
}

// R (1 or 2) rows against features [8 f0, 8 (f0 + V)) of one packed panel,
// over all of K, sums in registers.
template <int R, int V>
void Direct(const std::uint16_t* x, std::int64_t K, const std::uint16_t* panel, int f0, const float* bias,
            std::uint16_t* out, std::int64_t N, std::int64_t cols) {
  __m256 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
  const std::int64_t full = K / 2;  // pairs with both columns
  const std::uint16_t* wp = panel + 16 * f0;
  for (std::int64_t p = 0; p < full; ++p, wp += kPairLine) {
    if (f0 == 0)  // the first pass fetches the whole pair line ahead (a second pass finds it in L2)
      for (int l = 0; l < 4; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchAhead + 32 * l), _MM_HINT_T0);
    __m256 xe[R], xo[R];
    for (int r = 0; r < R; ++r) {
      xe[r] = _mm256_set1_ps(Bf16(x[r * K + 2 * p]));
      xo[r] = _mm256_set1_ps(Bf16(x[r * K + 2 * p + 1]));
    }
    for (int v = 0; v < V; ++v) {
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 16 * v));
      const __m256 we = Even(u), wo = Odd(u);
      for (int r = 0; r < R; ++r) {
        acc[r][v] = _mm256_fmadd_ps(xe[r], we, acc[r][v]);
        acc[r][v] = _mm256_fmadd_ps(xo[r], wo, acc[r][v]);
      }
    }
  }
  if (K % 2 != 0) {  // the last column alone (its pair's second weight is padding)
    for (int v = 0; v < V; ++v) {
      const __m256 we = Even(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 16 * v)));
      for (int r = 0; r < R; ++r) acc[r][v] = _mm256_fmadd_ps(_mm256_set1_ps(Bf16(x[r * K + K - 1])), we, acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    Finish<V>(acc[r], nullptr, bias != nullptr ? bias + 8 * f0 : nullptr, out + r * N + 8 * f0, cols - 8 * f0);
}

// Rows [0, R) x 16 features of the widened block against xf (float32 x,
// rows K apart) over kc columns; sums from / to c (rows 64 apart). The sums
// are named locals, not an array: GCC keeps an array of vectors updated in
// a loop in memory as well (a store per fma), which halved the kernel's
// speed.
template <int R>
void Micro(const float* xf, std::int64_t K, const float* w, std::int64_t kc, float* c, bool first) {
  static_assert(R >= 1 && R <= 6);
  __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0, a4 = a0, b4 = a0,
         a5 = a0, b5 = a0;
  if (!first) {
    a0 = _mm256_loadu_ps(c), b0 = _mm256_loadu_ps(c + 8);
    if constexpr (R > 1) a1 = _mm256_loadu_ps(c + kPanel), b1 = _mm256_loadu_ps(c + kPanel + 8);
    if constexpr (R > 2) a2 = _mm256_loadu_ps(c + 2 * kPanel), b2 = _mm256_loadu_ps(c + 2 * kPanel + 8);
    if constexpr (R > 3) a3 = _mm256_loadu_ps(c + 3 * kPanel), b3 = _mm256_loadu_ps(c + 3 * kPanel + 8);
    if constexpr (R > 4) a4 = _mm256_loadu_ps(c + 4 * kPanel), b4 = _mm256_loadu_ps(c + 4 * kPanel + 8);
    if constexpr (R > 5) a5 = _mm256_loadu_ps(c + 5 * kPanel), b5 = _mm256_loadu_ps(c + 5 * kPanel + 8);
  }
  const float* x1 = xf + K;
  const float* x2 = xf + 2 * K;
  const float* x3 = xf + 3 * K;
  const float* x4 = xf + 4 * K;
  const float* x5 = xf + 5 * K;
  for (std::int64_t k = 0; k < kc; ++k, w += kPanel) {
    const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
    __m256 x = _mm256_broadcast_ss(xf + k);
    a0 = _mm256_fmadd_ps(x, w0, a0);
    b0 = _mm256_fmadd_ps(x, w1, b0);
    if constexpr (R > 1) {
      x = _mm256_broadcast_ss(x1 + k);
      a1 = _mm256_fmadd_ps(x, w0, a1);
      b1 = _mm256_fmadd_ps(x, w1, b1);
    }
    if constexpr (R > 2) {
      x = _mm256_broadcast_ss(x2 + k);
      a2 = _mm256_fmadd_ps(x, w0, a2);
      b2 = _mm256_fmadd_ps(x, w1, b2);
    }
    if constexpr (R > 3) {
      x = _mm256_broadcast_ss(x3 + k);
      a3 = _mm256_fmadd_ps(x, w0, a3);
      b3 = _mm256_fmadd_ps(x, w1, b3);
    }
    if constexpr (R > 4) {
      x = _mm256_broadcast_ss(x4 + k);
      a4 = _mm256_fmadd_ps(x, w0, a4);
      b4 = _mm256_fmadd_ps(x, w1, b4);
    }
    if constexpr (R > 5) {
      x = _mm256_broadcast_ss(x5 + k);
      a5 = _mm256_fmadd_ps(x, w0, a5);
      b5 = _mm256_fmadd_ps(x, w1, b5);
    }
  }
  _mm256_storeu_ps(c, a0), _mm256_storeu_ps(c + 8, b0);
  if constexpr (R > 1) _mm256_storeu_ps(c + kPanel, a1), _mm256_storeu_ps(c + kPanel + 8, b1);
  if constexpr (R > 2) _mm256_storeu_ps(c + 2 * kPanel, a2), _mm256_storeu_ps(c + 2 * kPanel + 8, b2);
  if constexpr (R > 3) _mm256_storeu_ps(c + 3 * kPanel, a3), _mm256_storeu_ps(c + 3 * kPanel + 8, b3);
  if constexpr (R > 4) _mm256_storeu_ps(c + 4 * kPanel, a4), _mm256_storeu_ps(c + 4 * kPanel + 8, b4);
  if constexpr (R > 5) _mm256_storeu_ps(c + 5 * kPanel, a5), _mm256_storeu_ps(c + 5 * kPanel + 8, b5);
}

void MicroRows(std::int64_t rows, const float* xf, std::int64_t K, const float* w, std::int64_t kc, float* c,
               bool first) {
  switch (rows) {
    case 1:
      return Micro<1>(xf, K, w, kc, c, first);
    case 2:
      return Micro<2>(xf, K, w, kc, c, first);
    case 3:
      return Micro<3>(xf, K, w, kc, c, first);
    case 4:
      return Micro<4>(xf, K, w, kc, c, first);
    case 5:
      return Micro<5>(xf, K, w, kc, c, first);
    default:
      return Micro<6>(xf, K, w, kc, c, first);
  }
}

// Cache lines of the next block to fetch while a tile computes: with few
// rows a block's compute is as short as reading it from memory, and
// without this the first tile pass waited for memory while the other passes
// found the block in L1 (16 rows: 145 of the ~225 GFLOP/s FMA limit).
struct NextBlock {
  const char* lines = nullptr;  // the first line this tile fetches
  std::int64_t count = 0;       // how many
};

// Rows [0, R) (R <= 5) x features [16 j, 16 j + 16) of a packed bf16
// panel over columns [k0, k0 + kc) (k0 even), widening each pair line's
// 32-byte runs in registers (no widened copy of the weights is written):
// per pair (k, k + 1) two loads and four shifts / masks feed 4 R fmas.
// Sums from / to c (rows 64 apart), as Micro's; x as float32 (rows K apart);
// `next`: this call's share of the next block's lines, fetched meanwhile.
template <int R>
void PairTile(const float* xf, std::int64_t K, const std::uint16_t* panel, int j, std::int64_t k0, std::int64_t kc,
              float* c, bool first, NextBlock next) {
  static_assert(R >= 1 && R <= 5);
  __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0, a4 = a0, b4 = a0;
  if (!first) {
    a0 = _mm256_loadu_ps(c), b0 = _mm256_loadu_ps(c + 8);
    if constexpr (R > 1) a1 = _mm256_loadu_ps(c + kPanel), b1 = _mm256_loadu_ps(c + kPanel + 8);
    if constexpr (R > 2) a2 = _mm256_loadu_ps(c + 2 * kPanel), b2 = _mm256_loadu_ps(c + 2 * kPanel + 8);
    if constexpr (R > 3) a3 = _mm256_loadu_ps(c + 3 * kPanel), b3 = _mm256_loadu_ps(c + 3 * kPanel + 8);
    if constexpr (R > 4) a4 = _mm256_loadu_ps(c + 4 * kPanel), b4 = _mm256_loadu_ps(c + 4 * kPanel + 8);
  }
  const float* x0 = xf + k0;
  const float* x1 = x0 + K;
  const float* x2 = x0 + 2 * K;
  const float* x3 = x0 + 3 * K;
  const float* x4 = x0 + 4 * K;
  const std::uint16_t* wp = panel + k0 / 2 * kPairLine + 32 * j;
  const std::int64_t pairs = kc / 2;
  const std::int64_t fetch_per_pair = pairs > 0 ? (next.count + pairs - 1) / pairs : 0;
  for (std::int64_t p = 0; p < pairs; ++p, wp += kPairLine) {
    for (std::int64_t f = 0; f < fetch_per_pair && next.count > 0; ++f, --next.count, next.lines += 64)
      _mm_prefetch(next.lines, kNextBlockHint);
    const __m256i u0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp));
    const __m256i u1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 16));
    const __m256 e0 = Even(u0), e1 = Even(u1), o0 = Odd(u0), o1 = Odd(u1);
    const std::int64_t k = 2 * p;
    __m256 x = _mm256_broadcast_ss(x0 + k);
    a0 = _mm256_fmadd_ps(x, e0, a0);
    b0 = _mm256_fmadd_ps(x, e1, b0);
    x = _mm256_broadcast_ss(x0 + k + 1);
    a0 = _mm256_fmadd_ps(x, o0, a0);
    b0 = _mm256_fmadd_ps(x, o1, b0);
    if constexpr (R > 1) {
      x = _mm256_broadcast_ss(x1 + k);
      a1 = _mm256_fmadd_ps(x, e0, a1);
      b1 = _mm256_fmadd_ps(x, e1, b1);
      x = _mm256_broadcast_ss(x1 + k + 1);
      a1 = _mm256_fmadd_ps(x, o0, a1);
      b1 = _mm256_fmadd_ps(x, o1, b1);
    }
    if constexpr (R > 2) {
      x = _mm256_broadcast_ss(x2 + k);
      a2 = _mm256_fmadd_ps(x, e0, a2);
      b2 = _mm256_fmadd_ps(x, e1, b2);
      x = _mm256_broadcast_ss(x2 + k + 1);
      a2 = _mm256_fmadd_ps(x, o0, a2);
      b2 = _mm256_fmadd_ps(x, o1, b2);
    }
    if constexpr (R > 3) {
      x = _mm256_broadcast_ss(x3 + k);
      a3 = _mm256_fmadd_ps(x, e0, a3);
      b3 = _mm256_fmadd_ps(x, e1, b3);
      x = _mm256_broadcast_ss(x3 + k + 1);
      a3 = _mm256_fmadd_ps(x, o0, a3);
      b3 = _mm256_fmadd_ps(x, o1, b3);
    }
    if constexpr (R > 4) {
      x = _mm256_broadcast_ss(x4 + k);
      a4 = _mm256_fmadd_ps(x, e0, a4);
      b4 = _mm256_fmadd_ps(x, e1, b4);
      x = _mm256_broadcast_ss(x4 + k + 1);
      a4 = _mm256_fmadd_ps(x, o0, a4);
      b4 = _mm256_fmadd_ps(x, o1, b4);
    }
  }
  if (kc % 2 != 0) {  // the last column alone (its pair's second weight is padding)
    const std::int64_t k = kc - 1;
    const __m256 e0 = Even(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp)));
    const __m256 e1 = Even(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 16)));
    __m256 x = _mm256_broadcast_ss(x0 + k);
    a0 = _mm256_fmadd_ps(x, e0, a0);
    b0 = _mm256_fmadd_ps(x, e1, b0);
    if constexpr (R > 1) {
      x = _mm256_broadcast_ss(x1 + k);
      a1 = _mm256_fmadd_ps(x, e0, a1);
      b1 = _mm256_fmadd_ps(x, e1, b1);
    }
    if constexpr (R > 2) {
      x = _mm256_broadcast_ss(x2 + k);
      a2 = _mm256_fmadd_ps(x, e0, a2);
      b2 = _mm256_fmadd_ps(x, e1, b2);
    }
    if constexpr (R > 3) {
      x = _mm256_broadcast_ss(x3 + k);
      a3 = _mm256_fmadd_ps(x, e0, a3);
      b3 = _mm256_fmadd_ps(x, e1, b3);
    }
    if constexpr (R > 4) {
      x = _mm256_broadcast_ss(x4 + k);
      a4 = _mm256_fmadd_ps(x, e0, a4);
      b4 = _mm256_fmadd_ps(x, e1, b4);
    }
  }
  _mm256_storeu_ps(c, a0), _mm256_storeu_ps(c + 8, b0);
  if constexpr (R > 1) _mm256_storeu_ps(c + kPanel, a1), _mm256_storeu_ps(c + kPanel + 8, b1);
  if constexpr (R > 2) _mm256_storeu_ps(c + 2 * kPanel, a2), _mm256_storeu_ps(c + 2 * kPanel + 8, b2);
  if constexpr (R > 3) _mm256_storeu_ps(c + 3 * kPanel, a3), _mm256_storeu_ps(c + 3 * kPanel + 8, b3);
  if constexpr (R > 4) _mm256_storeu_ps(c + 4 * kPanel, a4), _mm256_storeu_ps(c + 4 * kPanel + 8, b4);
}

void PairTileRows(std::int64_t rows, const float* xf, std::int64_t K, const std::uint16_t* panel, int j,
                  std::int64_t k0, std::int64_t kc, float* c, bool first, NextBlock next) {
  switch (rows) {
    case 1:
      return PairTile<1>(xf, K, panel, j, k0, kc, c, first, next);
    case 2:
      return PairTile<2>(xf, K, panel, j, k0, kc, c, first, next);
    case 3:
      return PairTile<3>(xf, K, panel, j, k0, kc, c, first, next);
    case 4:
      return PairTile<4>(xf, K, panel, j, k0, kc, c, first, next);
    default:
      return PairTile<5>(xf, K, panel, j, k0, kc, c, first, next);
  }
}

constexpr std::int64_t kPairTileRows = 5;

// Per-thread buffers of the blocked path, kept across calls.
struct Scratch {
  std::vector<float> xf;     // [M, K] bf16 x widened
  std::vector<float> block;  // [kBlockK, 64] a panel's columns widened
  std::vector<float> sums;   // [M, 64] a panel's sums between blocks
};
Scratch& ThreadScratch() {
  thread_local Scratch s;
  return s;
}

void WidenRows(const std::uint16_t* x, std::int64_t n, float* out) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, LoadBf16(x + i));
  for (; i < n; ++i) out[i] = Bf16(x[i]);
}

// Panels [p_begin, p_end) of y [M, N] from float32 x [M, K], in blocks of
// kBlockK columns: block_of(p, k0, kc) gives columns [k0, k0 + kc) of
// panel p as float32 [kc][64] (a widened copy, or the float32 panel
// itself); 6 x 16 register tiles pass over each block.
template <typename BlockOf, typename Out>
void Blocked(const float* xf, std::int64_t M, std::int64_t K, const BlockOf& block_of, const float* scale,
             const float* bias, Out* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end) {
  Scratch& s = ThreadScratch();
  if (static_cast<std::int64_t>(s.sums.size()) < M * kPanel) s.sums.resize(static_cast<std::size_t>(M * kPanel));
  for (std::int64_t p = p_begin; p < p_end; ++p) {
    for (std::int64_t k0 = 0; k0 < K; k0 += kBlockK) {
      const std::int64_t kc = std::min(kBlockK, K - k0);
      const float* block = block_of(p, k0, kc);
      for (std::int64_t m0 = 0; m0 < M; m0 += kTileRows)
        for (int j = 0; j < 4; ++j)
          MicroRows(std::min(kTileRows, M - m0), xf + m0 * K + k0, K, block + 16 * j, kc,
                    s.sums.data() + m0 * kPanel + 16 * j, k0 == 0);
    }
    const std::int64_t n0 = p * kPanel, cols = std::min(kPanel, N - n0);
    for (std::int64_t m = 0; m < M; ++m) {
      const float* c = s.sums.data() + m * kPanel;
      const __m256 acc[8] = {_mm256_loadu_ps(c),      _mm256_loadu_ps(c + 8),  _mm256_loadu_ps(c + 16),
                             _mm256_loadu_ps(c + 24), _mm256_loadu_ps(c + 32), _mm256_loadu_ps(c + 40),
                             _mm256_loadu_ps(c + 48), _mm256_loadu_ps(c + 56)};
      Finish<8>(acc, scale != nullptr ? scale + n0 : nullptr, bias != nullptr ? bias + n0 : nullptr, out + m * N + n0,
                cols);
    }
  }
}

// The blocked path over bf16 x and panels widened by widen(p, k0, kc, block).
template <typename Widen>
void Widened(const std::uint16_t* x, std::int64_t M, std::int64_t K, const Widen& widen, const float* scale,
             const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end) {
  Scratch& s = ThreadScratch();
  if (static_cast<std::int64_t>(s.xf.size()) < M * K) s.xf.resize(static_cast<std::size_t>(M * K));
  if (s.block.size() < static_cast<std::size_t>(kBlockK * kPanel)) s.block.resize(kBlockK * kPanel);
  WidenRows(x, M * K, s.xf.data());
  Blocked(
      s.xf.data(), M, K,
      [&](std::int64_t p, std::int64_t k0, std::int64_t kc) {
        widen(p, k0, kc, s.block.data());
        return static_cast<const float*>(s.block.data());
      },
      scale, bias, out, N, p_begin, p_end);
}

// Panels [p_begin, p_end) of y [M, N] from float32 x and packed bf16
// panels, in blocks of kBlockK columns (a block's 32 KB of pair lines stay
// in L1 while the row tiles pass over them), sums kept in a buffer between
// blocks.
void PairPanels(const float* xf, std::int64_t M, std::int64_t K, const std::uint16_t* packed, const float* bias,
                std::uint16_t* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end) {
  Scratch& s = ThreadScratch();
  if (static_cast<std::int64_t>(s.sums.size()) < M * kPanel) s.sums.resize(static_cast<std::size_t>(M * kPanel));
  const std::int64_t panel_size = (K + 1) / 2 * kPairLine;
  for (std::int64_t p = p_begin; p < p_end; ++p) {
    const std::uint16_t* panel = packed + p * panel_size;
    for (std::int64_t k0 = 0; k0 < K; k0 += kBlockK) {
      const std::int64_t kc = std::min(kBlockK, K - k0);
      // Row tiles of nearly equal size (16 rows: 4 x 4, not 5 + 5 + 5 + 1).
      const std::int64_t tiles = (M + kPairTileRows - 1) / kPairTileRows;
      // The next block (this panel's next columns, or the next panel's
      // first) lies right after this one in the packed weights; its lines
      // are shared out over this block's tile calls.
      const bool last = k0 + kc >= K;
      const std::int64_t next_cols = last ? (p + 1 < p_end ? std::min(kBlockK, K) : 0) : std::min(kBlockK, K - k0 - kc);
      const std::int64_t next_lines = (next_cols + 1) / 2 * kPairLine * 2 / 64;
      const std::int64_t share = (next_lines + 4 * tiles - 1) / (4 * tiles);
      const char* next =
          reinterpret_cast<const char*>(last ? packed + (p + 1) * panel_size : panel + (k0 + kc) / 2 * kPairLine);
      for (std::int64_t t = 0; t < tiles; ++t) {
        const std::int64_t m0 = M * t / tiles, m1 = M * (t + 1) / tiles;
        for (int j = 0; j < 4; ++j) {
          const std::int64_t first_line = std::min(next_lines, (4 * t + j) * share);
          const NextBlock fetch{next + 64 * first_line, std::min(share, next_lines - first_line)};
          PairTileRows(m1 - m0, xf + m0 * K, K, panel, j, k0, kc, s.sums.data() + m0 * kPanel + 16 * j, k0 == 0, fetch);
        }
      }
    }
    const std::int64_t n0 = p * kPanel, cols = std::min(kPanel, N - n0);
    for (std::int64_t m = 0; m < M; ++m) {
      const float* c = s.sums.data() + m * kPanel;
      const __m256 acc[8] = {_mm256_loadu_ps(c),      _mm256_loadu_ps(c + 8),  _mm256_loadu_ps(c + 16),
                             _mm256_loadu_ps(c + 24), _mm256_loadu_ps(c + 32), _mm256_loadu_ps(c + 40),
                             _mm256_loadu_ps(c + 48), _mm256_loadu_ps(c + 56)};
      Finish<8>(acc, nullptr, bias != nullptr ? bias + n0 : nullptr, out + m * N + n0, cols);
    }
  }
}

// One row of float32 x against a float32 panel ([K][64]) over all of K:
// 8 vectors of sums, one fma chain each.
void DirectF32(const float* x, std::int64_t K, const float* panel, const float* bias, float* out, std::int64_t cols) {
  __m256 acc[8];
  for (int v = 0; v < 8; ++v) acc[v] = _mm256_setzero_ps();
  const float* w = panel;
  for (std::int64_t k = 0; k < K; ++k, w += kPanel) {
    for (int l = 0; l < 4; ++l)
      _mm_prefetch(reinterpret_cast<const char*>(w + kPrefetchAhead / 2 + 16 * l), _MM_HINT_T0);
    const __m256 a = _mm256_broadcast_ss(x + k);
    for (int v = 0; v < 8; ++v) acc[v] = _mm256_fmadd_ps(a, _mm256_loadu_ps(w + 8 * v), acc[v]);
  }
  Finish<8>(acc, nullptr, bias, out, cols);
}

// 8 rows of 8 floats transposed in registers.
inline void Transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Features [n0, n0 + 64) x columns [k0, k0 + kc) of row-order weights as
// float32 [kc][64]: 8 features x 8 columns at a time, each feature's 8
// values made by `row8(f, k)` (a vector of columns k..k+7 of feature f;
// zero past N and K), transposed.
template <typename Row8>
void WidenRowsTransposed(std::int64_t N, std::int64_t n0, std::int64_t k0, std::int64_t kc, float* block,
                         const Row8& row8) {
  for (std::int64_t g = 0; g < 8; ++g) {
    const std::int64_t f0 = n0 + 8 * g;
    for (std::int64_t k = 0; k < kc; k += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = f0 + i < N ? row8(f0 + i, k0 + k) : _mm256_setzero_ps();
      Transpose8(r);
      const std::int64_t lines = std::min<std::int64_t>(8, kc - k);
      for (std::int64_t j = 0; j < lines; ++j) _mm256_storeu_ps(block + (k + j) * kPanel + 8 * g, r[j]);
    }
  }
}

}  // namespace

void PackedLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint16_t* packed,
                        const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin,
                        std::int64_t p_end) {
  const std::int64_t panel_size = (K + 1) / 2 * kPairLine;
  if (M <= kDirectMaxRows) {
    for (std::int64_t p = p_begin; p < p_end; ++p) {
      const std::uint16_t* panel = packed + p * panel_size;
      const std::int64_t n0 = p * kPanel, cols = std::min(kPanel, N - n0);
      const float* b = bias != nullptr ? bias + n0 : nullptr;
      if (M == 1) {
        Direct<1, 8>(x, K, panel, 0, b, out + n0, N, cols);
      } else {
        // Two rows share each weight load, 32 features at a time (16
        // vectors of sums would not fit the 16 registers).
        Direct<2, 4>(x, K, panel, 0, b, out + n0, N, cols);
        if (cols > 32) Direct<2, 4>(x, K, panel, 4, b, out + n0, N, cols);
      }
    }
    return;
  }
  Scratch& s = ThreadScratch();
  if (static_cast<std::int64_t>(s.xf.size()) < M * K) s.xf.resize(static_cast<std::size_t>(M * K));
  WidenRows(x, M * K, s.xf.data());
  PairPanels(s.xf.data(), M, K, packed, bias, out, N, p_begin, p_end);
}

// The same with x already widened to float32 (the glue widens it once per
// call instead of once per chunk of panels); more than 2 rows.
void PackedLinearPanelsFloatX(const float* xf, std::int64_t M, std::int64_t K, const std::uint16_t* packed,
                              const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin,
                              std::int64_t p_end) {
  PairPanels(xf, M, K, packed, bias, out, N, p_begin, p_end);
}

void Int8PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::int8_t* q,
                           const float* scale, const float* bias, std::uint16_t* out, std::int64_t N,
                           std::int64_t p_begin, std::int64_t p_end) {
  Widened(
      x, M, K,
      [&](std::int64_t p, std::int64_t k0, std::int64_t kc, float* block) {
        WidenRowsTransposed(N, p * kPanel, k0, kc, block, [&](std::int64_t f, std::int64_t k) {
          const std::int8_t* row = q + f * K + k;
          if (k + 8 <= K)
            return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row))));
          alignas(16) std::int8_t tmp[16] = {};
          for (std::int64_t i = 0; k + i < K; ++i) tmp[i] = row[i];
          return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp))));
        });
      },
      scale, bias, out, N, p_begin, p_end);
}

void Int4PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint8_t* packed,
                           const float* scale, const std::uint8_t* zero, std::int64_t group, const float* bias,
                           std::uint16_t* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end) {
  // kernels/int4_weight.h's layout: rows of (K + 63) / 64 blocks of 32 bytes, byte j
  // of a block holding column j (low nibble) and j + 32 (high nibble).
  const std::int64_t row_bytes = (K + 63) / 64 * 32, groups = K / group;
  Widened(
      x, M, K,
      [&](std::int64_t p, std::int64_t k0, std::int64_t kc, float* block) {
        WidenRowsTransposed(N, p * kPanel, k0, kc, block, [&](std::int64_t f, std::int64_t k) {
          // Columns k..k+7 lie in one block's low or high half (k % 8 == 0),
          // and in one group (groups are multiples of 32).
          const std::uint8_t* b = packed + f * row_bytes + k / 64 * 32 + k % 32;
          const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
          const __m256i level =
              k % 64 < 32 ? _mm256_and_si256(bytes, _mm256_set1_epi32(15)) : _mm256_srli_epi32(bytes, 4);
          const std::int64_t g = f * groups + k / group;
          const __m256 w = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(level, _mm256_set1_epi32(zero[g]))),
                                         _mm256_set1_ps(scale[g]));
          return RoundBf16(w);
        });
      },
      nullptr, bias, out, N, p_begin, p_end);
}

// Float32 weights in panels of [K][64] float32 (packed_linear.h), float32
// x and y: one row reads the panel once (bound by memory); more rows go
// through the blocked path with the panel as its own block (no widening).
// The same fma chain per output either way, as the generic variant's.
void PackedLinearF32Panels(const float* x, std::int64_t M, std::int64_t K, const float* packed, const float* bias,
                           float* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end) {
  const std::int64_t panel_size = K * kPanel;
  if (M == 1) {
    for (std::int64_t p = p_begin; p < p_end; ++p) {
      const std::int64_t n0 = p * kPanel;
      DirectF32(x, K, packed + p * panel_size, bias != nullptr ? bias + n0 : nullptr, out + n0,
                std::min(kPanel, N - n0));
    }
    return;
  }
  Blocked(
      x, M, K, [&](std::int64_t p, std::int64_t k0, std::int64_t) { return packed + p * panel_size + k0 * kPanel; },
      nullptr, bias, out, N, p_begin, p_end);
}

}  // namespace ropeserve::cpu::avx2
