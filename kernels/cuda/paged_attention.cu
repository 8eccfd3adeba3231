// Paged attention for decode rows and prefill-chunk rows, with split-KV
// partitions for long contexts ("flash-decoding"): the keys of a row are cut
// into partitions; a block scores a partition's keys, takes their softmax and
// the weighted sum of values; a row with several partitions leaves
// (max, sum, unnormalised output) triples in the workspace, and the block
// that finishes its partitions last combines them (no second kernel).
//
// Two partition kernels, one contract:
//  - VectorPartitionKernel (head_dim 64, 128 or 256, 16-byte aligned
//    tensors): one block per (row, KV head, up to 8 of its query heads,
//    partition), so a GQA group reads its shared keys and values once; each
//    key is read by D/8 lanes with one 16-byte load each and folded into a
//    running (max, sum, output) per lane group (online softmax), with no
//    score buffer; the lane groups, then the warps, are merged at the end.
//  - GenericPartitionKernel, every other shape: one block per (row, query
//    head, partition), scores into shared memory, then values — the simple
//    reference beside the fast path.
// A third, on tensor cores (paged_attention_mma.cu, AttentionKernel::kMma:
// cp.async-staged 16-key chunks, one softmax update a chunk), is chosen
// only by name until a GPU run measures it against the vector kernel.
// None shares keys across a prefill chunk's rows: each row re-reads them
// (see kernels/cuda/README.md).
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/paged_attention.cuh"

namespace ropeserve::cuda {

namespace {

using detail::BlockHeads;
using detail::FromFloat;
using detail::HeadsOfBlock;
using detail::MergePartitionsIfLast;
using detail::NumPartitions;
using detail::PartitionArgs;
using detail::PartitionSpan;
using detail::SpanOfBlock;
using detail::ToFloat;
using detail::WriteMergedWarps;

constexpr int kThreads = 128;

// Eight 16-bit values <-> eight floats.
template <typename T>
__device__ __forceinline__ void Unpack8(const uint4& raw, float* f) {
  const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = ToFloat(h[i]);
}

// Merges running softmax state (m, l, acc) with another (m2, l2, acc2):
// both are sums over disjoint keys, scaled to their own maxima.
template <int N>
__device__ __forceinline__ void MergeState(float& m, float& l, float* acc, float m2, float l2, const float* acc2) {
  const float mn = fmaxf(m, m2);
  if (mn == -FLT_MAX) return;  // both empty
  const float a = __expf(m - mn), b = __expf(m2 - mn);
  l = l * a + l2 * b;
#pragma unroll
  for (int d = 0; d < N; ++d) acc[d] = acc[d] * a + acc2[d] * b;
  m = mn;
}

constexpr int kVectorWarps = kThreads / 32;

// See the file comment. D: head_dim; G: the block's query heads rounded up
// to a power of two (<= max_group, 8 or 4: AttentionKernel), so small groups
// hold fewer registers; a group larger than max_group takes several blocks.
template <typename T, int D, int G>
__global__ void __launch_bounds__(kThreads) VectorPartitionKernel(const PartitionArgs<T> a, std::int64_t max_group) {
  const T* __restrict__ k_cache = a.k_cache;
  const T* __restrict__ v_cache = a.v_cache;
  constexpr int kLanesPerKey = D / 8;              // one 16-byte load each
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;  // keys a warp takes at once
  constexpr int kUnroll = 2;                       // loads in flight per lane
  __shared__ float sm_m[kVectorWarps][G], sm_l[kVectorWarps][G];
  __shared__ float sm_acc[kVectorWarps][G][D];
  const std::int64_t r = blockIdx.x, p = blockIdx.z;
  const BlockHeads bh = HeadsOfBlock(a.num_heads, a.num_kv_heads, max_group, G);
  const std::int64_t kvh = bh.kvh, h0 = bh.h0;
  const int heads = bh.heads;
  const PartitionSpan span = SpanOfBlock(a);
  if (span.start >= span.end) return;
  const std::int64_t start = span.start, end = span.end;
  const std::int32_t* __restrict__ table = a.block_tables + span.seq * a.max_blocks_per_seq;
  const std::int64_t block_size = a.block_size, num_kv_heads = a.num_kv_heads;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int sub = lane / kLanesPerKey, dim0 = (lane % kLanesPerKey) * 8;

  float qv[G][8];
#pragma unroll
  for (int i = 0; i < G; ++i) {
    if (i < heads) {
      Unpack8<T>(*reinterpret_cast<const uint4*>(a.q + r * a.q_row_stride + (h0 + i) * D + dim0), qv[i]);
#pragma unroll
      for (int d = 0; d < 8; ++d) qv[i][d] *= a.scale;
    } else {
#pragma unroll
      for (int d = 0; d < 8; ++d) qv[i][d] = 0.f;
    }
  }
  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int i = 0; i < G; ++i) {
    m[i] = -FLT_MAX;
    l[i] = 0.f;
#pragma unroll
    for (int d = 0; d < 8; ++d) acc[i][d] = 0.f;
  }

  // Every lane of a warp runs the same iterations (the shuffles need them);
  // a lane past the partition's end loads nothing and folds nothing.
  constexpr int kStride = kVectorWarps * kKeysPerWarp * kUnroll;
  for (std::int64_t base = start + warp * kKeysPerWarp * kUnroll; base < end; base += kStride) {
    uint4 kraw[kUnroll], vraw[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t j = base + u * kKeysPerWarp + sub;
      valid[u] = j < end;
      if (valid[u]) {
        const std::int64_t slot = static_cast<std::int64_t>(table[j / block_size]) * block_size + j % block_size;
        const std::int64_t at = (slot * num_kv_heads + kvh) * D + dim0;
        kraw[u] = *reinterpret_cast<const uint4*>(k_cache + at);
        vraw[u] = *reinterpret_cast<const uint4*>(v_cache + at);
      } else {
        kraw[u] = vraw[u] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[8], vf[8];
      Unpack8<T>(kraw[u], kf);
      Unpack8<T>(vraw[u], vf);
#pragma unroll
      for (int i = 0; i < G; ++i) {
        float s = 0.f;
#pragma unroll
        for (int d = 0; d < 8; ++d) s += qv[i][d] * kf[d];
#pragma unroll
        for (int o = kLanesPerKey / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (valid[u] && i < heads) {
          const float mn = fmaxf(m[i], s);
          const float a = __expf(m[i] - mn), e = __expf(s - mn);
          l[i] = l[i] * a + e;
#pragma unroll
          for (int d = 0; d < 8; ++d) acc[i][d] = acc[i][d] * a + e * vf[d];
          m[i] = mn;
        }
      }
    }
  }

  // Merge the warp's lane groups (same dims, other keys), then the warps.
#pragma unroll
  for (int o = kLanesPerKey; o < 32; o <<= 1) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m[i], o), l2 = __shfl_xor_sync(0xffffffffu, l[i], o);
      float acc2[8];
#pragma unroll
      for (int d = 0; d < 8; ++d) acc2[d] = __shfl_xor_sync(0xffffffffu, acc[i][d], o);
      MergeState<8>(m[i], l[i], acc[i], m2, l2, acc2);
    }
  }
  if (sub == 0) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
      if (dim0 == 0) {
        sm_m[warp][i] = m[i];
        sm_l[warp][i] = l[i];
      }
#pragma unroll
      for (int d = 0; d < 8; ++d) sm_acc[warp][i][dim0 + d] = acc[i][d];
    }
  }
  __syncthreads();
  const std::int64_t parts = NumPartitions(span.context, a.partition_size);
  WriteMergedWarps<T, D>(a, &sm_m[0][0], &sm_l[0][0], &sm_acc[0][0][0], kVectorWarps, G, -FLT_MAX, r, h0, heads, p,
                         parts);
  MergePartitionsIfLast(a, h0, heads, D, parts);
}

template <typename T>
__global__ void GenericPartitionKernel(const PartitionArgs<T> a, std::int64_t head_dim) {
  const T* __restrict__ k_cache = a.k_cache;
  const T* __restrict__ v_cache = a.v_cache;
  const std::int64_t num_heads = a.num_heads, num_kv_heads = a.num_kv_heads, block_size = a.block_size;
  const std::int64_t partition_size = a.partition_size, max_partitions = a.max_partitions;
  extern __shared__ float shared[];
  float* q_s = shared;                // [head_dim]
  float* scores = shared + head_dim;  // [partition_size]
  __shared__ float scratch[32];
  const std::int64_t r = blockIdx.x, h = blockIdx.y, p = blockIdx.z;
  const PartitionSpan span = SpanOfBlock(a);
  if (span.start >= span.end) return;
  const std::int64_t start = span.start, end = span.end;
  const std::int64_t kvh = h / (num_heads / num_kv_heads);
  const std::int32_t* table = a.block_tables + span.seq * a.max_blocks_per_seq;
  const T* qr = a.q + r * a.q_row_stride + h * head_dim;
  for (std::int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) q_s[d] = ToFloat(qr[d]);
  __syncthreads();

  // Scores: one warp per key.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  auto slot_of = [&](std::int64_t j) {
    return static_cast<std::int64_t>(table[j / block_size]) * block_size + j % block_size;
  };
  for (std::int64_t j = start + warp; j < end; j += warps) {
    const T* kj = k_cache + (slot_of(j) * num_kv_heads + kvh) * head_dim;
    float dot = 0;
    for (std::int64_t d = lane; d < head_dim; d += 32) dot += q_s[d] * ToFloat(kj[d]);
    dot = detail::WarpSum(dot);
    if (lane == 0) scores[j - start] = dot * a.scale;
  }
  __syncthreads();
  const std::int64_t n = end - start;
  float m = -FLT_MAX;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, scores[j]);
  m = detail::BlockMax(m, scratch);
  float l = 0;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = __expf(scores[j] - m);
    scores[j] = e;
    l += e;
  }
  l = detail::BlockSum(l, scratch);  // its barriers also publish the exps

  // Weighted values: threads over dimensions (coalesced reads of a value row).
  const std::int64_t parts = NumPartitions(span.context, partition_size);
  float* ws = a.workspace + ((r * num_heads + h) * max_partitions + p) * (head_dim + 2);
  for (std::int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0;
    for (std::int64_t j = 0; j < n; ++j)
      acc += scores[j] * ToFloat(v_cache[(slot_of(start + j) * num_kv_heads + kvh) * head_dim + d]);
    if (parts == 1) {
      a.out[(r * num_heads + h) * head_dim + d] = FromFloat<T>(acc / l);
    } else {
      ws[2 + d] = acc;
    }
  }
  if (parts > 1 && threadIdx.x == 0) {
    ws[0] = m;
    ws[1] = l;
  }
  MergePartitionsIfLast(a, h, 1, head_dim, parts);
}

}  // namespace

std::int64_t PagedAttentionWorkspaceBytes(std::int64_t rows, std::int64_t num_heads, std::int64_t head_dim,
                                          std::int64_t max_context, std::int64_t partition_size) {
  return rows * num_heads * NumPartitions(max_context, partition_size) * (head_dim + 2) *
             static_cast<std::int64_t>(sizeof(float)) +
         rows * num_heads * static_cast<std::int64_t>(sizeof(std::int32_t));
}

int PagedAttention(void* out, const void* q, std::int64_t q_row_stride, const void* k_cache, const void* v_cache,
                   const std::int32_t* block_tables, const std::int64_t* query_start, const std::int64_t* context_lens,
                   std::int64_t num_seqs, std::int64_t rows, std::int64_t num_heads, std::int64_t num_kv_heads,
                   std::int64_t head_dim, std::int64_t block_size, std::int64_t max_blocks_per_seq,
                   std::int64_t max_context, float scale, std::int64_t partition_size, void* workspace,
                   std::int32_t* counters, DType dtype, Stream stream, AttentionKernel kernel) {
  if (rows == 0 || max_context == 0) return 0;
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || partition_size <= 0)
    return static_cast<int>(cudaErrorInvalidValue);
  const std::int64_t max_partitions = NumPartitions(max_context, partition_size);
  auto s = static_cast<cudaStream_t>(stream);
  const auto aligned = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
  const bool aligned16 = aligned(out) && aligned(q) && q_row_stride % 8 == 0 && aligned(k_cache) && aligned(v_cache);
  const bool vector =
      kernel != AttentionKernel::kGeneric && (head_dim == 64 || head_dim == 128 || head_dim == 256) && aligned16;
  const std::int64_t group = num_heads / num_kv_heads;
  const std::int64_t max_group = kernel == AttentionKernel::kVector4 ? 4 : 8;
  return detail::Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    const detail::PartitionArgs<T> args{static_cast<T*>(out),
                                        static_cast<const T*>(q),
                                        q_row_stride,
                                        static_cast<const T*>(k_cache),
                                        static_cast<const T*>(v_cache),
                                        block_tables,
                                        query_start,
                                        context_lens,
                                        num_seqs,
                                        rows,
                                        num_heads,
                                        num_kv_heads,
                                        block_size,
                                        max_blocks_per_seq,
                                        scale,
                                        partition_size,
                                        max_partitions,
                                        static_cast<float*>(workspace),
                                        counters};
    if (kernel == AttentionKernel::kMma && aligned16 && detail::LaunchMmaPartitions(args, head_dim, s)) {
      // the tensor-core kernel took it (head_dim 64 or 128)
    } else if (vector) {
      const std::int64_t chunks = (group + max_group - 1) / max_group;
      const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(num_kv_heads * chunks),
                      static_cast<unsigned>(max_partitions));
      auto launch = [&](auto fn) { fn<<<grid, kThreads, 0, s>>>(args, max_group); };
      auto by_group = [&](auto dim) {
        constexpr int D = decltype(dim)::value;
        if (group == 1)
          launch(VectorPartitionKernel<T, D, 1>);
        else if (group == 2)
          launch(VectorPartitionKernel<T, D, 2>);
        else if (group <= 4 || max_group == 4)
          launch(VectorPartitionKernel<T, D, 4>);
        else
          launch(VectorPartitionKernel<T, D, 8>);
      };
      if (head_dim == 64)
        by_group(std::integral_constant<int, 64>{});
      else if (head_dim == 128)
        by_group(std::integral_constant<int, 128>{});
      else
        by_group(std::integral_constant<int, 256>{});
    } else {
      const std::size_t shared = static_cast<std::size_t>(head_dim + partition_size) * sizeof(float);
      if (shared > 48 * 1024)
        cudaFuncSetAttribute(GenericPartitionKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared));
      const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(num_heads),
                      static_cast<unsigned>(max_partitions));
      GenericPartitionKernel<T><<<grid, kThreads, shared, s>>>(args, head_dim);
    }
  });
}

}  // namespace ropeserve::cuda
