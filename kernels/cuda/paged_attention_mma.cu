// The tensor-core partition kernel of PagedAttention (AttentionKernel::kMma),
// written for issue 57's "attention near the bandwidth": the same contract
// and workspace as paged_attention.cu's vector kernel, which stays the
// default until a GPU run measures both side by side.
//
// One block per (query row, KV head, up to 16 of its query heads,
// partition): four warps, each taking 16-key chunks of the partition in
// turn (chunk c to warp c % 4) with its own online softmax, merged at the
// end through shared memory. A warp's chunk:
//  - K and V arrive in shared memory by cp.async, three chunks in flight a
//    warp (16 KB a warp at head_dim 128), zero-filled past the partition;
//    each key's page is looked up once (one lane a key, 32-bit arithmetic)
//    and shared by shuffles;
//  - scores S [16 heads x 16 keys] = Q K^T by m16n8k16 mma (bf16 or f16 in,
//    float32 sums), Q read from a shared tile by ldmatrix, K by ldmatrix;
//  - one softmax update per chunk and head (max over the chunk's keys by
//    two shuffles), P rounded to the dtype in registers as the A operand of
//    O [16 heads x head_dim] += P V, V by ldmatrix.trans: each thread owns
//    distinct outputs (the mma's accumulator fragments).
// Shared tiles are XOR-swizzled by 16-byte piece (piece ^ row % 8), so each
// ldmatrix phase reads eight rows from eight bank groups.
// Heads of the block past the group's are zero rows of Q: computed, never
// written. A row's partitions are merged by the block that finishes last
// (MergePartitionsIfLast), as in the other partition kernels. P in 16 bits is flash-attention's rounding: the row sums
// use P before rounding.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace ropeserve::cuda::detail {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 16;     // keys a warp takes at once: P V's k dimension
constexpr int kHeadRows = 16;  // query heads a block: the mma's m dimension
constexpr int kStages = 3;     // chunks in flight a warp

// One chunk of K (or V), 16-bit values; the block's dynamic shared memory.
template <int D>
__host__ __device__ constexpr int TileBytes() {
  return 2 * kChunk * D;
}
template <int D>
__host__ __device__ constexpr int SharedBytes() {
  return 2 * kHeadRows * D + 2 * kWarps * kStages * TileBytes<D>();
}

// Byte offset of 16-byte piece `piece` of row `row` in a [rows, D] tile.
template <int D>
__device__ __forceinline__ int Swizzled(int row, int piece) {
  return row * D * 2 + ((piece ^ (row & 7)) << 4);
}

__device__ __forceinline__ std::uint32_t SharedAddress(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes, global to shared, asynchronously; zeros when !valid (then
// `src` is not read).
__device__ __forceinline__ void CopyAsync16(std::uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CommitAsync() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void WaitAsync() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

// Four 8x8 16-bit matrices from shared memory; lane l gives the address of
// row l % 8 of matrix l / 8.
__device__ __forceinline__ void LoadMatrices(std::uint32_t (&r)[4], std::uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void LoadMatricesTransposed(std::uint32_t (&r)[4], std::uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// A warp's running softmax over the keys it has seen, for the two head
// rows a lane's fragments hold (lane / 4 and lane / 4 + 8): maxima, this
// lane's share of the sums, and O [16 heads x D] as D / 8 accumulator
// fragments (dims 8t .. 8t + 7 in fragment t).
template <int D>
struct WarpState {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};
  float o[D / 8][4] = {};
};

// One chunk (its first `valid` keys of 16 real, the rest masked) out of
// its shared tiles into the warp's state.
template <typename T, int D>
__device__ __forceinline__ void FoldChunk(WarpState<D>& st, const unsigned char* q_tile, const unsigned char* k_tile,
                                          const unsigned char* v_tile, int valid, float scale) {
  const int lane = threadIdx.x % 32, mi = lane / 8, mrow = lane % 8;
  float s[2][4] = {};  // scores: keys 0-7 and 8-15
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    std::uint32_t a[4], b[4];
    LoadMatrices(a, SharedAddress(q_tile + Swizzled<D>((mi % 2) * 8 + mrow, 2 * ks + mi / 2)));
    LoadMatrices(b, SharedAddress(k_tile + Swizzled<D>((mi / 2) * 8 + mrow, 2 * ks + mi % 2)));
    Mma<T>(s[0], a, b[0], b[1]);
    Mma<T>(s[1], a, b[2], b[3]);
  }
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = 8 * n + (lane % 4) * 2 + (e & 1);
      s[n][e] = key < valid ? s[n][e] * scale : -INFINITY;
      mx[e / 2] = fmaxf(mx[e / 2], s[n][e]);
    }
  }
  float alpha[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    const float mn = fmaxf(st.m[h], mx[h]);  // finite: the chunk has a key before `end`
    alpha[h] = __expf(st.m[h] - mn);         // 0 on the first chunk (m = -inf)
    st.m[h] = mn;
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = __expf(s[n][e] - st.m[e / 2]);  // masked keys: exp(-inf) = 0
      sum[e / 2] += s[n][e];
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) st.l[h] = st.l[h] * alpha[h] + sum[h];
  // P [16 heads x 16 keys] as the A fragments: the score fragments' layout.
  const std::uint32_t p[4] = {Pack2<T>(s[0][0], s[0][1]), Pack2<T>(s[0][2], s[0][3]), Pack2<T>(s[1][0], s[1][1]),
                              Pack2<T>(s[1][2], s[1][3])};
#pragma unroll
  for (int t = 0; t < D / 8; t += 2) {
    std::uint32_t b[4];
    LoadMatricesTransposed(b, SharedAddress(v_tile + Swizzled<D>((mi % 2) * 8 + mrow, t + mi / 2)));
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      st.o[t + u][0] *= alpha[0];
      st.o[t + u][1] *= alpha[0];
      st.o[t + u][2] *= alpha[1];
      st.o[t + u][3] *= alpha[1];
      Mma<T>(st.o[t + u], p, b[2 * u], b[2 * u + 1]);
    }
  }
}

// Merges the warps' states (shared memory, reusing the stage buffers) and
// writes the block's heads: the output when the row has one partition,
// else (max, sum, unnormalised output) into the workspace.
template <typename T, int D>
__device__ __forceinline__ void WriteBlock(const WarpState<D>& st, unsigned char* smem, const PartitionArgs<T>& a,
                                           std::int64_t r, std::int64_t h0, int heads, std::int64_t p,
                                           std::int64_t parts) {
  float* sm_m = reinterpret_cast<float*>(smem);  // [kWarps][kHeadRows]
  float* sm_l = sm_m + kWarps * kHeadRows;       // [kWarps][kHeadRows]
  float* sm_o = sm_l + kWarps * kHeadRows;       // [kWarps][kHeadRows][D]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, row = lane / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = st.l[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (lane % 4 == 0) {
      sm_m[warp * kHeadRows + row + 8 * h] = st.m[h];
      sm_l[warp * kHeadRows + row + 8 * h] = l;
    }
  }
#pragma unroll
  for (int t = 0; t < D / 8; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      sm_o[(warp * kHeadRows + row + 8 * (e / 2)) * D + 8 * t + (lane % 4) * 2 + (e & 1)] = st.o[t][e];
  }
  __syncthreads();
  WriteMergedWarps<T, D>(a, sm_m, sm_l, sm_o, kWarps, kHeadRows, -INFINITY, r, h0, heads, p, parts);
}

// See the file comment. Registers: at most 128 a thread (four blocks' worth
// of an SM's register file), checked by tests/cuda/compile_check.sh.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 4) MmaPartitionKernel(const PartitionArgs<T> a) {
  constexpr int kPieces = D / 8;  // 16-byte pieces a row
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* q_tile = smem;
  const std::int64_t r = blockIdx.x, p = blockIdx.z;
  const BlockHeads bh = HeadsOfBlock(a.num_heads, a.num_kv_heads, kHeadRows, kHeadRows);
  const std::int64_t kvh = bh.kvh, h0 = bh.h0;
  const int heads = bh.heads;
  const PartitionSpan span = SpanOfBlock(a);
  if (span.start >= span.end) return;
  const std::int64_t start = span.start, end = span.end;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  for (int i = threadIdx.x; i < kHeadRows * kPieces; i += kThreads) {
    const int row = i / kPieces, piece = i % kPieces;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row < heads) v = *reinterpret_cast<const uint4*>(a.q + r * a.q_row_stride + (h0 + row) * D + piece * 8);
    *reinterpret_cast<uint4*>(q_tile + Swizzled<D>(row, piece)) = v;
  }

  // This warp's chunks: w, w + 4, ... of the partition's.
  const int n_chunks = static_cast<int>((end - start + kChunk - 1) / kChunk);
  const int mine = n_chunks > warp ? (n_chunks - warp + kWarps - 1) / kWarps : 0;
  unsigned char* stages = smem + kHeadRows * D * 2 + warp * kStages * 2 * TileBytes<D>();
  const std::int32_t* table = a.block_tables + span.seq * a.max_blocks_per_seq;
  const int block_size = static_cast<int>(a.block_size);
  auto load = [&](int i) {  // the warp's i-th chunk into stage i % kStages
    const std::int64_t key0 = start + static_cast<std::int64_t>(warp + kWarps * i) * kChunk;
    // Lane k < 16 looks up key k's slot (32-bit: contexts and slot counts fit).
    const int j = static_cast<int>(key0) + lane % kChunk;
    const bool valid_lane = key0 + lane % kChunk < end;
    const int slot_lane = valid_lane ? table[j / block_size] * block_size + j % block_size : 0;
    unsigned char* k_tile = stages + (i % kStages) * 2 * TileBytes<D>();
    unsigned char* v_tile = k_tile + TileBytes<D>();
#pragma unroll
    for (int it = 0; it < kChunk * kPieces / 32; ++it) {
      const int key = (lane + 32 * it) / kPieces, piece = (lane + 32 * it) % kPieces;
      const int slot = __shfl_sync(0xffffffffu, slot_lane, key);
      const bool valid = key0 + key < end;
      const std::int64_t at = (static_cast<std::int64_t>(slot) * a.num_kv_heads + kvh) * D + piece * 8;
      CopyAsync16(SharedAddress(k_tile + Swizzled<D>(key, piece)), a.k_cache + at, valid);
      CopyAsync16(SharedAddress(v_tile + Swizzled<D>(key, piece)), a.v_cache + at, valid);
    }
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < mine) load(i);
    CommitAsync();
  }
  __syncthreads();  // the Q tile
  WarpState<D> st;
  for (int i = 0; i < mine; ++i) {
    if (i + kStages - 1 < mine) load(i + kStages - 1);
    CommitAsync();
    WaitAsync<kStages - 1>();  // chunk i's group is complete
    __syncwarp();
    const unsigned char* k_tile = stages + (i % kStages) * 2 * TileBytes<D>();
    const std::int64_t left_keys = end - start - static_cast<std::int64_t>(warp + kWarps * i) * kChunk;
    FoldChunk<T, D>(st, q_tile, k_tile, k_tile + TileBytes<D>(),
                    left_keys < kChunk ? static_cast<int>(left_keys) : kChunk, a.scale);
    __syncwarp();  // before the next load overwrites this stage
  }
  WaitAsync<0>();
  __syncthreads();  // every warp done with its stages: they become the merge's scratch
  const std::int64_t parts = NumPartitions(span.context, a.partition_size);
  WriteBlock<T, D>(st, smem + kHeadRows * D * 2, a, r, h0, heads, p, parts);
  MergePartitionsIfLast(a, h0, heads, D, parts);
}

template <typename T, int D>
void Launch(const PartitionArgs<T>& a, cudaStream_t stream) {
  constexpr int kBytes = SharedBytes<D>();
  static_assert(kWarps * kStages * 2 * TileBytes<D>() >= (2 * kWarps * kHeadRows + kWarps * kHeadRows * D) * 4,
                "the merge's scratch fits in the stage buffers");
  // Past 48 KB of shared memory a kernel must opt in, once per device (so
  // a CUDA graph captured after the device's first launch makes no such call).
  static std::atomic<std::uint64_t> opted_in{0};  // a bit per device (< 64)
  int device = 0;
  cudaGetDevice(&device);
  const std::uint64_t bit = device < 64 ? std::uint64_t{1} << device : 0;
  if (bit == 0 || (opted_in.load() & bit) == 0) {
    cudaFuncSetAttribute(MmaPartitionKernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
    opted_in.fetch_or(bit);
  }
  const std::int64_t group = a.num_heads / a.num_kv_heads;
  const std::int64_t chunks = (group + kHeadRows - 1) / kHeadRows;
  const dim3 grid(static_cast<unsigned>(a.rows), static_cast<unsigned>(a.num_kv_heads * chunks),
                  static_cast<unsigned>(a.max_partitions));
  MmaPartitionKernel<T, D><<<grid, kThreads, kBytes, stream>>>(a);
}

}  // namespace

template <typename T>
bool LaunchMmaPartitions(const PartitionArgs<T>& args, std::int64_t head_dim, cudaStream_t stream) {
  if (head_dim == 64) {
    Launch<T, 64>(args, stream);
  } else if (head_dim == 128) {
    Launch<T, 128>(args, stream);
  } else {
    return false;
  }
  return true;
}

template bool LaunchMmaPartitions<__nv_bfloat16>(const PartitionArgs<__nv_bfloat16>&, std::int64_t, cudaStream_t);
template bool LaunchMmaPartitions<__half>(const PartitionArgs<__half>&, std::int64_t, cudaStream_t);

}  // namespace ropeserve::cuda::detail
