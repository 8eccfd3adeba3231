// LibTorch glue for kernels/cuda: checks shapes, dtypes and devices, then
// calls the raw-pointer kernels on the current CUDA stream. Compiled only
// when the LibTorch found by CMake has CUDA (ROPESERVE_HAVE_CUDA). Errors
// are thrown as c10::Error (TORCH_CHECK), like LibTorch's own ops.
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

#include "kernels/cuda/kernels.h"  // AttentionKernel

namespace ropeserve::cuda {

// Keys per split-KV partition of the paged attention.
constexpr std::int64_t kPartitionSize = 512;
// The split-KV partition for `rows` query rows (issue 57): 8 x rows rounded
// up to a power of two, within [64, kPartitionSize], so a decode step of a
// few sequences spreads its keys over more of the GPU's SMs (one sequence
// at a 300-token context: 10 blocks for 2 KV heads, not 2) while large
// batches and prefill chunks keep 512-token partitions.
std::int64_t PartitionSizeForRows(std::int64_t rows);
// The bytes of a workspace for `rows` rows at PartitionSizeForRows'
// partitions, raised to what any fewer rows need at theirs (9 rows take
// fewer partials than 8: the need is not monotone in rows), so the decode
// graphs' pool, measured at the largest bucket, holds every bucket's.
std::int64_t PartitionedAttentionWorkspaceBytes(std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                                                std::int64_t max_context);
// A workspace of that size, for launches at PartitionSizeForRows(rows).
at::Tensor PartitionedAttentionWorkspace(std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                                         std::int64_t max_context, const at::TensorOptions& options);

// k, v: [T, Hkv, D] (rows may be strided); caches [blocks, block_size, Hkv, D].
void ReshapeAndCache(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
                     const at::Tensor& slot_mapping);
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);
// residual += x (rounded); x = RmsNorm(residual). Both [rows, hidden], contiguous.
void FusedAddRmsNorm(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps);
// gate_up [T, 2 I] (gate, then up) -> silu(gate) * up [T, I] (see kernels.h).
at::Tensor SiluAndMul(const at::Tensor& gate_up);
// q: [T, Hq, D], k: [T, Hkv, D] in place; cos_sin: float32 [max_pos, rotary_dim].
void RotaryEmbedding(const at::Tensor& positions, at::Tensor& q, at::Tensor& k, const at::Tensor& cos_sin);
// RotaryEmbedding on q, k rotated into k_cache and v into v_cache at
// slot_mapping's slots (ReshapeAndCache's), k left as it was: one kernel.
void RopeAndCache(const at::Tensor& positions, at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& slot_mapping, const at::Tensor& cos_sin);
// Decode and prefill-chunk rows over the paged cache (see kernels.h):
// block_tables int32 [S, max_blocks], query_start int64 [S + 1],
// context_lens int64 [S]. `workspace`: float32, at least
// PagedAttentionWorkspace's elements (undefined: allocated here).
at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                          const at::Tensor& block_tables, const at::Tensor& query_start, const at::Tensor& context_lens,
                          std::int64_t max_context, double scale, const at::Tensor& workspace = {},
                          std::int64_t partition_size = kPartitionSize,
                          AttentionKernel kernel = AttentionKernel::kAuto);
// The float32 workspace PagedAttention needs for `rows` query rows of
// `heads` x `head_dim` and contexts up to max_context, allocated once per
// forward and shared by its layers.
at::Tensor PagedAttentionWorkspace(std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                                   std::int64_t max_context, const at::TensorOptions& options,
                                   std::int64_t partition_size = kPartitionSize);
// x [rows, K] 16-bit (already in the weight's column order) times the
// 4-bit weight packed / scale / zero (kernels.h's Int4Linear; the tensors
// of an Int4Weight, kernels/int4_weight.h, moved to the device) plus bias (float32 [N] or
// undefined) -> [rows, N] in x's dtype. 1 <= rows <= kInt4GemvMaxRows.
at::Tensor Int4Linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scale, const at::Tensor& zero,
                      std::int64_t k, std::int64_t group_size, const at::Tensor& bias);
// The same on tensor cores (kernels.h's Int4MmaLinear) for 1 <= rows <=
// kInt4MmaMaxRows, the weight in Int4MmaLayout's order (an Int4MmaWeight's
// packed [N / 16, Kp / 64, 32, 16], scale and zero [K / group_size, N]).
at::Tensor Int4MmaLinear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scale, const at::Tensor& zero,
                         std::int64_t k, std::int64_t group_size, const at::Tensor& bias);
// logits float32 [R, V], V >= 1 -> (logsumexp, max) float32 [R] and the
// lowest argmax int64 [R] (kernels.h's SummarizeRows).
std::tuple<at::Tensor, at::Tensor, at::Tensor> SummarizeRows(const at::Tensor& logits);
// The same, and the int32 [4R] they are views of: the floats' bits of
// (logsumexp, max, the greedy token's logit = max) then the argmax as
// int32 (kernels.h's `packed`): what the sampler copies back for a step of
// greedy rows, one transfer. Returns (logsumexp, max, argmax, packed).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> SummarizeRowsPacked(const at::Tensor& logits);
// The same into `packed` int32 [4R] and `argmax` int64 [R], contiguous, on
// the logits' device (no allocation: what a CUDA graph captures, its
// outputs at fixed addresses). Returns (logsumexp, max) as views of packed.
std::tuple<at::Tensor, at::Tensor> SummarizeRowsPackedInto(const at::Tensor& logits, const at::Tensor& packed,
                                                           const at::Tensor& argmax);
// Queues a copy of `src` (contiguous, on a CUDA device) into `dst`, host
// memory of at least src.nbytes() that must be pinned (cudaHostAlloc; a
// graph captures the copy only into such memory), on the current stream;
// returns at once. Nothing records the copy for LibTorch's pinned-memory
// allocator: the caller keeps `dst` until it has waited for the stream.
void CopyToHostAsync(void* dst, const at::Tensor& src);
// logits float32 [R, V]; per-row parameters [R]; returns int64 [R].
at::Tensor SampleRows(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& top_k,
                      const at::Tensor& top_p, const at::Tensor& min_p, const at::Tensor& seed,
                      const at::Tensor& offset);

}  // namespace ropeserve::cuda
