// Group-wise 4-bit weights times 1-64 rows of 16-bit x on tensor cores
// (Int4MmaLinear, issue 57 item 5): what replaces, for the rows of decode
// steps and of graph-replayed batches, both the matrix-vector kernel
// (int4_linear.cu, which re-reads x per row and converts each weight from
// int to float) and the dequantization of whole matrices for cuBLAS past
// its 16 rows. Chosen by name until a GPU run measures it.
//
// The weights are in Int4MmaLayout's order (kernels/int4_weight.h): one
// block per 16 output columns; its four warps take the 128-column units of
// K in turn (unit u to warp u % 4), so a group (32, 64 or 128 columns,
// aligned) never spans two warps. Per 64 columns a lane loads 16 bytes of
// levels (its B operands for four k steps of two 8-column tiles; a warp's
// loads run two units ahead of the unit it folds, one past 32 rows) and
// per 32 columns and row pair 16 bytes of x (its A operands for two steps;
// up to 32 rows a unit's x is loaded at once: one round trip a unit). A level
// becomes an operand with two bit operations and one subtraction, exactly:
// (q | 0x4300) is the bfloat16 128 + q (0x6400: the float16 1024 + q), so
// subtracting (128 + zero) leaves the integer q - zero. The mma sums
// x (q - zero) in float32 over a group; at the group's end the lane scales
// its accumulators by the group's scales into its running sums: the
// arithmetic of int4_linear.cu's kernel (scale times the group's sum), in
// another order. The warps' sums meet in shared memory, added in warp
// order, then the bias. Row r's result depends only on row r of x (rows
// are independent lanes of the mma; the order of the sums is fixed by K).
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/mma.cuh"

namespace ropeserve::cuda {

namespace {

using detail::FromFloat;

constexpr int kWarps = 4;
constexpr int kColumns = 16;  // output columns a block: two 8-column mma tiles
constexpr int kUnit = 128;    // columns of K a warp takes at once: two 64-column chunks
// Units of levels in flight a warp beyond the one it folds: two for few
// rows (where the bytes are the time), one past 32 rows (registers).
template <int MT>
constexpr int kAhead = MT <= 2 ? 2 : 1;

// The exponent bits that make a level q in the low mantissa bits read as
// kBase + q, and kBase.
template <typename T>
struct LevelBits;
template <>
struct LevelBits<__nv_bfloat16> {
  static constexpr std::uint32_t kPair = 0x43004300u;
  static constexpr float kBase = 128.0f;
};
template <>
struct LevelBits<__half> {
  static constexpr std::uint32_t kPair = 0x64006400u;
  static constexpr float kBase = 1024.0f;
};

// (base + zero) in both halves of a pair.
template <typename T>
__device__ __forceinline__ std::uint32_t ZeroPair(std::uint8_t zero) {
  const float v = LevelBits<T>::kBase + static_cast<float>(zero);
  return detail::Pack2<T>(v, v);
}

// The levels at bits 0-3 and 16-19 of v, less the zero point, as a pair
// of T: integers in [-16, 15], exact.
template <typename T>
__device__ __forceinline__ std::uint32_t LevelPair(std::uint32_t v, std::uint32_t zero_pair) {
  const std::uint32_t biased = (v & 0x000F000Fu) | LevelBits<T>::kPair;
  using Pair = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, __nv_bfloat162, __half2>;
  Pair a, b;
  std::memcpy(&a, &biased, 4);
  std::memcpy(&b, &zero_pair, 4);
  const Pair d = __hsub2(a, b);
  std::uint32_t out;
  std::memcpy(&out, &d, 4);
  return out;
}

__device__ __forceinline__ std::uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// A warp's state: per 16-row tile mt and 8-column tile j, the mma
// accumulators of the current group and the scaled running sums.
template <int MT>
struct Sums {
  float group[MT][2][4] = {};
  float total[MT][2][4] = {};
};

struct Problem {
  int rows, n, k, group;
  int tile;  // this block's 16 columns: blockIdx.x
};

// x's rows for one 32-column half of K starting at k0, as this lane's A
// operands: rows 16 mt + c and 16 mt + c + 8, x[row, k0 + 8t .. k0 + 8t + 7]
// (one 16-byte load each; zeros past the rows).
template <typename T, int MT>
__device__ __forceinline__ void LoadX(uint4 (&xv)[MT][2], const T* __restrict__ x, int k0, const Problem& p) {
  const int lane = threadIdx.x % 32, c = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
      const int row = 16 * mt + 8 * rh + c;
      xv[mt][rh] = row < p.rows ? *reinterpret_cast<const uint4*>(x + static_cast<std::int64_t>(row) * p.k + k0 + 8 * t)
                                : make_uint4(0, 0, 0, 0);
    }
  }
}

// One 32-column half of K (inside one group): two mma steps per tile pair,
// from `levels` (the chunk's four words; words 2 wh and 2 wh + 1 are this
// half's) and x's operands for the half.
template <typename T, int MT>
__device__ __forceinline__ void FoldHalf(Sums<MT>& s, const uint4& levels, int wh, const uint4 (&xv)[MT][2],
                                         const std::uint32_t (&zero_pair)[2]) {
#pragma unroll
  for (int wl = 0; wl < 2; ++wl) {
    const std::uint32_t word = Word(levels, 2 * wh + wl);
    std::uint32_t b[2][2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) b[j][h] = LevelPair<T>(word >> (4 * (2 * j + h)), zero_pair[j]);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const std::uint32_t a[4] = {Word(xv[mt][0], 2 * wl), Word(xv[mt][1], 2 * wl), Word(xv[mt][0], 2 * wl + 1),
                                  Word(xv[mt][1], 2 * wl + 1)};
#pragma unroll
      for (int j = 0; j < 2; ++j) detail::Mma<T>(s.group[mt][j], a, b[j][0], b[j][1]);
    }
  }
}

// The end of group g: the group's sums times its scales (this lane's
// columns 2t, 2t + 1 of each tile) into the running sums.
template <int MT>
__device__ __forceinline__ void CloseGroup(Sums<MT>& s, const float* __restrict__ scale, int g, const Problem& p) {
  const int t = threadIdx.x % 32 % 4;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float2 sc = *reinterpret_cast<const float2*>(scale + static_cast<std::int64_t>(g) * p.n + kColumns * p.tile +
                                                       8 * j + 2 * t);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s.total[mt][j][e] = fmaf(e % 2 == 0 ? sc.x : sc.y, s.group[mt][j][e], s.total[mt][j][e]);
        s.group[mt][j][e] = 0.0f;
      }
    }
  }
}

// One 128-column unit of K from k0 (its levels: two chunks): per half,
// the group's zero points at its start, the two mma steps, the scales at
// its end. Few rows: x for the whole unit is loaded first (one round trip
// to L1 / L2 a unit, not four); more (MT >= 3, whose operands would take
// too many registers): a half at a time.
template <typename T, int MT>
__device__ __forceinline__ void FoldUnit(Sums<MT>& s, const uint4 (&levels)[2], int k0, const T* __restrict__ x,
                                         const float* __restrict__ scale, const std::uint8_t* __restrict__ zero,
                                         const Problem& p) {
  constexpr int kEarly = MT <= 2 ? 4 : 1;  // halves whose x is loaded up front
  const int c = threadIdx.x % 32 / 4;
  uint4 xv[kEarly][MT][2];
#pragma unroll
  for (int half = 0; half < kEarly; ++half)
    if (k0 + 32 * half < p.k) LoadX<T, MT>(xv[half], x, k0 + 32 * half, p);
  std::uint32_t zero_pair[2] = {0, 0};
#pragma unroll
  for (int half = 0; half < 4; ++half) {
    const int kh = k0 + 32 * half;
    if (kh >= p.k) break;  // K's padding (K is a multiple of 32)
    const int g = kh / p.group;
    if (kh % p.group == 0) {  // a unit starts a group: the first half always loads them
#pragma unroll
      for (int j = 0; j < 2; ++j)
        zero_pair[j] = ZeroPair<T>(zero[static_cast<std::int64_t>(g) * p.n + kColumns * p.tile + 8 * j + c]);
    }
    if constexpr (kEarly == 4) {
      FoldHalf<T, MT>(s, levels[half / 2], half % 2, xv[half], zero_pair);
    } else {
      LoadX<T, MT>(xv[0], x, kh, p);
      FoldHalf<T, MT>(s, levels[half / 2], half % 2, xv[0], zero_pair);
    }
    if ((kh + 32) % p.group == 0) CloseGroup<MT>(s, scale, g, p);
  }
}

__device__ __forceinline__ void LoadUnit(uint4 (&out)[2], const uint4* __restrict__ tile_levels, int unit, int chunks) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int kc = 2 * unit + i;
    out[i] = kc < chunks ? __ldcs(tile_levels + static_cast<std::int64_t>(kc) * 32 + lane) : make_uint4(0, 0, 0, 0);
  }
}

template <typename T, int MT>
__global__ void __launch_bounds__(kWarps * 32)
    Int4MmaKernel(T* __restrict__ y, const T* __restrict__ x, int rows, const uint4* __restrict__ levels,
                  const float* __restrict__ scale, const std::uint8_t* __restrict__ zero,
                  const float* __restrict__ bias, int n, int k, int group) {
  __shared__ float partial[kWarps][MT * 16][kColumns];
  const Problem p{rows, n, k, group, static_cast<int>(blockIdx.x)};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c = lane / 4, t = lane % 4;
  const int chunks = (k + 63) / 64, units = (k + kUnit - 1) / kUnit;
  const uint4* tile_levels = levels + static_cast<std::int64_t>(p.tile) * chunks * 32;
  Sums<MT> s;
  // Levels kAhead units ahead: unit u's loads are issued kAhead of this
  // warp's units before it is used (a ring of registers, indexed at
  // compile time by unrolling).
  uint4 ring[kAhead<MT>][2];
#pragma unroll
  for (int i = 0; i < kAhead<MT>; ++i)
    if (warp + i * kWarps < units) LoadUnit(ring[i], tile_levels, warp + i * kWarps, chunks);
  for (int u0 = warp; u0 < units; u0 += kAhead<MT> * kWarps) {
#pragma unroll
    for (int i = 0; i < kAhead<MT>; ++i) {
      const int u = u0 + i * kWarps;
      if (u >= units) break;
      const uint4 cur[2] = {ring[i][0], ring[i][1]};
      if (u + kAhead<MT> * kWarps < units) LoadUnit(ring[i], tile_levels, u + kAhead<MT> * kWarps, chunks);
      FoldUnit<T, MT>(s, cur, u * kUnit, x, scale, zero, p);
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[warp][16 * mt + c + 8 * (e / 2)][8 * j + 2 * t + e % 2] = s.total[mt][j][e];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rows * kColumns; i += kWarps * 32) {
    const int r = i / kColumns, col = i % kColumns, out = kColumns * p.tile + col;
    float v = partial[0][r][col];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) v += partial[w][r][col];
    if (bias != nullptr) v += bias[out];
    y[static_cast<std::int64_t>(r) * n + out] = FromFloat<T>(v);
  }
}

template <typename T, int MT>
void Launch(void* y, const void* x, std::int64_t rows, const std::uint8_t* packed, const float* scale,
            const std::uint8_t* zero, const float* bias, std::int64_t N, std::int64_t K, std::int64_t group,
            cudaStream_t stream) {
  Int4MmaKernel<T, MT><<<static_cast<unsigned>(N / kColumns), kWarps * 32, 0, stream>>>(
      static_cast<T*>(y), static_cast<const T*>(x), static_cast<int>(rows), reinterpret_cast<const uint4*>(packed),
      scale, zero, bias, static_cast<int>(N), static_cast<int>(K), static_cast<int>(group));
}

}  // namespace

int Int4MmaLinear(void* y, const void* x, std::int64_t rows, const std::uint8_t* packed, const float* scale,
                  const std::uint8_t* zero, const float* bias, std::int64_t N, std::int64_t K, std::int64_t group_size,
                  DType dtype, Stream stream) {
  if (rows < 1 || rows > kInt4MmaMaxRows || N < kColumns || N % kColumns != 0 || K < 32 || K % 32 != 0 ||
      (group_size != 32 && group_size != 64 && group_size != 128) || K % group_size != 0 || N > INT32_MAX ||
      K > INT32_MAX || reinterpret_cast<std::uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(packed) % 16 != 0)
    return cudaErrorInvalidValue;
  const auto s = static_cast<cudaStream_t>(stream);
  return detail::Dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    // 16-row tiles for the rows; the tiles' rows past `rows` are zeros.
    detail::ForRows<16, 32, 48, 64>(rows, [&](auto r) {
      Launch<T, decltype(r)::value / 16>(y, x, rows, packed, scale, zero, bias, N, K, group_size, s);
    });
  });
}

}  // namespace ropeserve::cuda
