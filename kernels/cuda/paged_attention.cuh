// What paged_attention.cu's partition kernels share: which sequence a query
// row belongs to and what it sees, how many split-KV partitions its context
// takes, the workspace and the merge of a row's partitions by the block
// that finishes last, and the tensor-core partition kernel's launcher
// (paged_attention_mma.cu).
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace ropeserve::cuda::detail {

__host__ __device__ inline std::int64_t NumPartitions(std::int64_t context, std::int64_t partition_size) {
  return (context + partition_size - 1) / partition_size;
}

// Query row r's sequence (the last s with query_start[s] <= r, by bisection
// over the S + 1 starts) and the cached tokens it sees: its sequence's
// context less the rows after it in its chunk (causal within the chunk).
// Rows past the batch's last sequence see nothing.
__device__ inline std::int64_t RowContext(std::int64_t r, const std::int64_t* __restrict__ query_start,
                                          const std::int64_t* __restrict__ context_lens, std::int64_t num_seqs,
                                          std::int64_t* seq) {
  if (num_seqs <= 0 || r >= query_start[num_seqs]) return 0;
  std::int64_t lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (query_start[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  *seq = lo;
  return context_lens[lo] - (query_start[lo + 1] - r) + 1;
}

// This block's counter of finished partitions (kernels.h: an int32 per
// row and head, zero before and after a launch): every partition kernel's
// grid is (rows, at most num_heads grid rows, max_partitions).
__device__ __forceinline__ int* PartitionCounter(int* counters, std::int64_t num_heads) {
  return counters + static_cast<std::int64_t>(blockIdx.x) * num_heads + blockIdx.y;
}

// The arguments every partition kernel takes (one struct, passed by value
// as a kernel parameter).
template <typename T>
struct PartitionArgs {
  T* out;
  const T* q;
  std::int64_t q_row_stride;  // elements between q's rows (heads contiguous)
  const T* k_cache;
  const T* v_cache;
  const std::int32_t* block_tables;
  const std::int64_t* query_start;
  const std::int64_t* context_lens;
  std::int64_t num_seqs, rows, num_heads, num_kv_heads, block_size, max_blocks_per_seq;
  float scale;
  std::int64_t partition_size, max_partitions;
  float* workspace;  // [rows, num_heads, max_partitions, head_dim + 2]: (max, sum, unnormalised output)
  int* counters;     // [rows, num_heads]: see PartitionCounter
};

// Query row blockIdx.x's partition blockIdx.z: its sequence, the cached
// tokens the row sees, and the keys [start, end) the partition takes
// (empty, start >= end, when it lies past the context: the block returns).
struct PartitionSpan {
  std::int64_t seq, context, start, end;
};
template <typename T>
__device__ inline PartitionSpan SpanOfBlock(const PartitionArgs<T>& a) {
  PartitionSpan s{0, 0, 0, 0};
  s.context = RowContext(blockIdx.x, a.query_start, a.context_lens, a.num_seqs, &s.seq);
  s.start = blockIdx.z * a.partition_size;
  s.end = min(s.context, s.start + a.partition_size);
  return s;
}

// Called by every thread of a partition block of query row blockIdx.x
// after it has written heads [h0, h0 + heads)'s partials (or the row's
// output when its context takes one partition: then nothing is merged).
// With `parts` > 1 partitions the block that finishes last (a counter per
// row and grid row) merges them into `out` and sets the counter back to
// zero, so no second kernel runs (issue 57: one kernel a layer fewer).
template <typename T>
__device__ void MergePartitionsIfLast(const PartitionArgs<T>& a, std::int64_t h0, int heads, std::int64_t head_dim,
                                      std::int64_t parts) {
  if (parts <= 1) return;  // the same for the whole block
  __shared__ int last;
  int* counter = PartitionCounter(a.counters, a.num_heads);
  __threadfence();  // this block's partials reach the device before it is counted
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == static_cast<int>(parts) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // The other blocks' partials, read from L2 (__ldcg): this SM's L1 may
  // hold an earlier launch's.
  const std::int64_t r = blockIdx.x, num_heads = a.num_heads, max_partitions = a.max_partitions;
  for (std::int64_t idx = threadIdx.x; idx < heads * head_dim; idx += blockDim.x) {
    const std::int64_t h = h0 + idx / head_dim, d = idx % head_dim;
    const float* ws = a.workspace + (r * num_heads + h) * max_partitions * (head_dim + 2);
    float m = -FLT_MAX;
    for (std::int64_t p = 0; p < parts; ++p) m = fmaxf(m, __ldcg(ws + p * (head_dim + 2)));
    float l = 0.f, acc = 0.f;
    for (std::int64_t p = 0; p < parts; ++p) {
      const float f = __expf(__ldcg(ws + p * (head_dim + 2)) - m);
      l += __ldcg(ws + p * (head_dim + 2) + 1) * f;
      acc += __ldcg(ws + p * (head_dim + 2) + 2 + d) * f;
    }
    a.out[(r * num_heads + h) * head_dim + d] = FromFloat<T>(acc / l);
  }
  if (threadIdx.x == 0) *counter = 0;  // ready for the next launch (a graph's replay)
}

// The query heads of a block of a grouped-query partition kernel: grid row
// blockIdx.y takes `per_block` heads of KV head kvh's group (a group
// larger than that takes several grid rows), at most `cap` of them.
struct BlockHeads {
  std::int64_t kvh, h0;  // the KV head; the block's first query head
  int heads;             // query heads from h0 on
};
__device__ inline BlockHeads HeadsOfBlock(std::int64_t num_heads, std::int64_t num_kv_heads, std::int64_t per_block,
                                          int cap) {
  const std::int64_t group = num_heads / num_kv_heads;
  const std::int64_t chunks = (group + per_block - 1) / per_block;
  const std::int64_t kvh = blockIdx.y / chunks, h0 = kvh * group + (blockIdx.y % chunks) * per_block;
  const std::int64_t left = kvh * group + group - h0;  // query heads from h0 on in this group
  return {kvh, h0, left < cap ? static_cast<int>(left) : cap};
}

// The end of a grouped-query partition block: its warps' softmax states in
// shared memory (warp w's max, sum and unnormalised output for head i at
// m[w * stride + i], l[w * stride + i], o[(w * stride + i) * D + d]; a
// warp that saw no key has max `empty`) merged for heads [h0, h0 + heads),
// written as the row's output when it has one partition, else as this
// partition's (max, sum, output) in the workspace.
template <typename T, int D>
__device__ __forceinline__ void WriteMergedWarps(const PartitionArgs<T>& a, const float* m, const float* l,
                                                 const float* o, int warps, int stride, float empty, std::int64_t r,
                                                 std::int64_t h0, int heads, std::int64_t p, std::int64_t parts) {
  for (int idx = threadIdx.x; idx < heads * D; idx += blockDim.x) {
    const int i = idx / D, d = idx % D;
    float mt = empty;
    for (int w = 0; w < warps; ++w) mt = fmaxf(mt, m[w * stride + i]);
    float lt = 0.f, at = 0.f;
    for (int w = 0; w < warps; ++w) {
      const float mw = m[w * stride + i];
      if (mw == empty) continue;  // a warp that saw no key
      const float f = __expf(mw - mt);
      lt += l[w * stride + i] * f;
      at += o[(w * stride + i) * D + d] * f;
    }
    const std::int64_t h = h0 + i;
    if (parts == 1) {
      a.out[(r * a.num_heads + h) * D + d] = FromFloat<T>(at / lt);
    } else {
      float* ws = a.workspace + ((r * a.num_heads + h) * a.max_partitions + p) * (D + 2);
      ws[2 + d] = at;
      if (d == 0) {
        ws[0] = mt;
        ws[1] = lt;
      }
    }
  }
}

// Launches the tensor-core partition kernel (AttentionKernel::kMma) for
// head_dim 64 or 128 and GQA groups of up to 16 query heads a block (larger
// groups take several); false, launching nothing, for any other head_dim.
template <typename T>
bool LaunchMmaPartitions(const PartitionArgs<T>& args, std::int64_t head_dim, cudaStream_t stream);

}  // namespace ropeserve::cuda::detail
