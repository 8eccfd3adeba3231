// Paged attention for decode rows and prefill-chunk rows, with split-KV
// partitions for long contexts ("flash-decoding"): one block per (row,
// query head, partition) scores the partition's keys into shared memory,
// takes their softmax and the weighted sum of values; rows with several
// partitions are combined by a second kernel from (max, sum, unnormalised
// output) triples. A first version: correct for every shape the CPU kernel
// takes, not yet tiled for tensor cores (prefill rows each re-read their
// keys; see kernels/cuda/README.md).
#include "kernels/cuda/common.cuh"

namespace ropeserve::cuda {

namespace {

using detail::FromFloat;
using detail::ToFloat;

constexpr int kThreads = 128;

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

template <typename T>
__global__ void AttentionPartitionKernel(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ k_cache,
                                         const T* __restrict__ v_cache, const std::int32_t* __restrict__ block_tables,
                                         const std::int64_t* __restrict__ query_start,
                                         const std::int64_t* __restrict__ context_lens, std::int64_t num_seqs,
                                         std::int64_t num_heads, std::int64_t num_kv_heads, std::int64_t head_dim,
                                         std::int64_t block_size, std::int64_t max_blocks_per_seq, float scale,
                                         std::int64_t partition_size, std::int64_t max_partitions,
                                         float* __restrict__ workspace) {
  extern __shared__ float shared[];
  float* q_s = shared;                // [head_dim]
  float* scores = shared + head_dim;  // [partition_size]
  __shared__ float scratch[32];
  const std::int64_t r = blockIdx.x, h = blockIdx.y, p = blockIdx.z;
  std::int64_t seq = 0;
  const std::int64_t context = RowContext(r, query_start, context_lens, num_seqs, &seq);
  const std::int64_t start = p * partition_size;
  if (start >= context) return;
  const std::int64_t end = min(context, start + partition_size);
  const std::int64_t kvh = h / (num_heads / num_kv_heads);
  const std::int32_t* table = block_tables + seq * max_blocks_per_seq;
  const T* qr = q + (r * num_heads + h) * head_dim;
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
    if (lane == 0) scores[j - start] = dot * scale;
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
  const std::int64_t parts = NumPartitions(context, partition_size);
  float* ws = workspace + ((r * num_heads + h) * max_partitions + p) * (head_dim + 2);
  for (std::int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0;
    for (std::int64_t j = 0; j < n; ++j)
      acc += scores[j] * ToFloat(v_cache[(slot_of(start + j) * num_kv_heads + kvh) * head_dim + d]);
    if (parts == 1) {
      out[(r * num_heads + h) * head_dim + d] = FromFloat<T>(acc / l);
    } else {
      ws[2 + d] = acc;
    }
  }
  if (parts > 1 && threadIdx.x == 0) {
    ws[0] = m;
    ws[1] = l;
  }
}

template <typename T>
__global__ void CombinePartitionsKernel(T* __restrict__ out, const std::int64_t* __restrict__ query_start,
                                        const std::int64_t* __restrict__ context_lens, std::int64_t num_seqs,
                                        std::int64_t num_heads, std::int64_t head_dim, std::int64_t partition_size,
                                        std::int64_t max_partitions, const float* __restrict__ workspace) {
  const std::int64_t r = blockIdx.x, h = blockIdx.y;
  std::int64_t seq = 0;
  const std::int64_t parts = NumPartitions(RowContext(r, query_start, context_lens, num_seqs, &seq), partition_size);
  if (parts <= 1) return;
  const float* ws = workspace + (r * num_heads + h) * max_partitions * (head_dim + 2);
  float m = -FLT_MAX;
  for (std::int64_t p = 0; p < parts; ++p) m = fmaxf(m, ws[p * (head_dim + 2)]);
  float l = 0;
  for (std::int64_t p = 0; p < parts; ++p) l += ws[p * (head_dim + 2) + 1] * __expf(ws[p * (head_dim + 2)] - m);
  for (std::int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0;
    for (std::int64_t p = 0; p < parts; ++p) acc += ws[p * (head_dim + 2) + 2 + d] * __expf(ws[p * (head_dim + 2)] - m);
    out[(r * num_heads + h) * head_dim + d] = FromFloat<T>(acc / l);
  }
}

}  // namespace

std::int64_t PagedAttentionWorkspaceBytes(std::int64_t rows, std::int64_t num_heads, std::int64_t head_dim,
                                          std::int64_t max_context, std::int64_t partition_size) {
  return rows * num_heads * NumPartitions(max_context, partition_size) * (head_dim + 2) *
         static_cast<std::int64_t>(sizeof(float));
}

int PagedAttention(void* out, const void* q, const void* k_cache, const void* v_cache, const std::int32_t* block_tables,
                   const std::int64_t* query_start, const std::int64_t* context_lens, std::int64_t num_seqs,
                   std::int64_t rows, std::int64_t num_heads, std::int64_t num_kv_heads, std::int64_t head_dim,
                   std::int64_t block_size, std::int64_t max_blocks_per_seq, std::int64_t max_context, float scale,
                   std::int64_t partition_size, void* workspace, DType dtype, Stream stream) {
  if (rows == 0 || max_context == 0) return 0;
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || partition_size <= 0)
    return static_cast<int>(cudaErrorInvalidValue);
  const std::int64_t max_partitions = NumPartitions(max_context, partition_size);
  const std::size_t shared = static_cast<std::size_t>(head_dim + partition_size) * sizeof(float);
  auto s = static_cast<cudaStream_t>(stream);
  return detail::Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (shared > 48 * 1024)
      cudaFuncSetAttribute(AttentionPartitionKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(shared));
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(num_heads),
                    static_cast<unsigned>(max_partitions));
    AttentionPartitionKernel<T><<<grid, kThreads, shared, s>>>(
        static_cast<T*>(out), static_cast<const T*>(q), static_cast<const T*>(k_cache), static_cast<const T*>(v_cache),
        block_tables, query_start, context_lens, num_seqs, num_heads, num_kv_heads, head_dim, block_size,
        max_blocks_per_seq, scale, partition_size, max_partitions, static_cast<float*>(workspace));
    if (max_partitions > 1)
      CombinePartitionsKernel<T>
          <<<dim3(static_cast<unsigned>(rows), static_cast<unsigned>(num_heads)), kThreads, 0, s>>>(
              static_cast<T*>(out), query_start, context_lens, num_seqs, num_heads, head_dim, partition_size,
              max_partitions, static_cast<const float*>(workspace));
  });
}

}  // namespace ropeserve::cuda
