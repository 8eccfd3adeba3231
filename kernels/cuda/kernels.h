// CUDA kernels for the GPU worker: raw-pointer entry points, no LibTorch
// and no CUDA headers here (kernels/cuda/torch_glue.h wraps them for
// tensors). Each returns 0 or a cudaError_t value from the launch; all run
// asynchronously on `stream` (a cudaStream_t; null = the legacy default).
//
// Layouts match kernels/cpu and kernels/reference (their tests are the
// oracle): activations row-major [tokens, heads, head_dim]; the paged KV
// cache per layer is [num_blocks, block_size, num_kv_heads, head_dim]; slot
// = block * block_size + offset. 16-bit float types (bf16, f16) with f32
// accumulation.
#pragma once

#include <cstdint>

namespace ropeserve::cuda {

enum class DType { kF16, kBF16 };
using Stream = void*;

// k_cache/v_cache[slot_mapping[t]] = k/v[t] for every token t (slots < 0
// are skipped: the padding rows of a padded batch). k and v rows are `key_stride` / `value_stride`
// elements apart (q/k/v may be views of one fused projection).
int ReshapeAndCache(const void* k, const void* v, void* k_cache, void* v_cache, const std::int64_t* slot_mapping,
                    std::int64_t num_tokens, std::int64_t num_kv_heads, std::int64_t head_dim, std::int64_t key_stride,
                    std::int64_t value_stride, DType dtype, Stream stream);

// out[r] = weight * to_dtype(x[r] * rsqrt(mean(x[r]^2) + eps)), as Hugging
// Face's LlamaRMSNorm rounds it.
int RmsNorm(void* out, const void* x, const void* weight, std::int64_t rows, std::int64_t hidden, float eps,
            DType dtype, Stream stream);

// residual[r] = to_dtype(residual[r] + x[r]); x[r] = RmsNorm(residual[r]).
int FusedAddRmsNorm(void* x, void* residual, const void* weight, std::int64_t rows, std::int64_t hidden, float eps,
                    DType dtype, Stream stream);

// out[t, i] = silu(gate[t, i]) * up[t, i] for gate_up [T, 2 I] (gate
// columns, then up) -> out [T, I], rounded as Hugging Face's
// act_fn(gate) * up is: silu in float32 rounded to the dtype, then the
// product rounded. One pass instead of LibTorch's silu, mul and copies.
int SiluAndMul(void* out, const void* gate_up, std::int64_t num_tokens, std::int64_t intermediate, DType dtype,
               Stream stream);

// Rotate-half RoPE in place on the first `rotary_dim` dims of every head of
// q [T, num_heads, head_dim] and k [T, num_kv_heads, head_dim] (rows
// `q_stride` / `k_stride` elements apart). cos_sin: float32
// [max_position, rotary_dim]: cos(p * f_i) for i < rotary_dim / 2, then
// sin(p * f_i).
int RotaryEmbedding(const std::int64_t* positions, void* q, void* k, const float* cos_sin, std::int64_t num_tokens,
                    std::int64_t num_heads, std::int64_t num_kv_heads, std::int64_t head_dim, std::int64_t rotary_dim,
                    std::int64_t q_stride, std::int64_t k_stride, DType dtype, Stream stream);

// RotaryEmbedding on q in place and, in the same kernel, k rotated into its
// cache slot and v copied into its (ReshapeAndCache's slots; k itself is
// left unrotated, rows `v_stride` elements apart for v): the same bits as
// RotaryEmbedding then ReshapeAndCache, one launch instead of two.
int RopeAndCache(const std::int64_t* positions, void* q, const void* k, const void* v, void* k_cache, void* v_cache,
                 const std::int64_t* slot_mapping, const float* cos_sin, std::int64_t num_tokens,
                 std::int64_t num_heads, std::int64_t num_kv_heads, std::int64_t head_dim, std::int64_t rotary_dim,
                 std::int64_t q_stride, std::int64_t k_stride, std::int64_t v_stride, DType dtype, Stream stream);

// Attention of query rows over the paged cache, grouped-query aware, on
// the packed batch contract the CPU kernel takes (kernels/cpu/paged_attention.h):
// sequence s owns rows [query_start[s], query_start[s + 1]) of q
// [R, num_heads, head_dim] (rows `q_row_stride` elements apart, each row's
// heads contiguous: a view of the qkv projection; out is contiguous), which are the last of its context_lens[s]
// tokens, each seeing the cached prefix and itself (causal within the
// chunk); rows past query_start[num_seqs] are left unwritten. Keys are
// split into partitions of `partition_size` tokens (split-KV,
// "flash-decoding") when a row's context is longer; the partial results
// meet in `workspace` (float32 [rows, num_heads, partitions, head_dim + 2])
// and the last of a row's blocks to finish combines them, counting in
// `counters` (int32 [rows, num_heads], zero before a launch and left zero
// after it; PagedAttentionWorkspaceBytes counts both).
// `max_context` bounds every context (it sizes the grid: a captured CUDA
// graph passes the cache's capacity per sequence; blocks past a row's own
// context exit at once), so the launch depends on no value on the device.
// `kernel` picks the partition kernel (paged_attention.cu): kAuto, the
// vector kernel where it applies (head_dim 64/128/256, 16-byte aligned)
// with up to 8 query heads of a GQA group per block, else the generic one;
// kVector4, the same with up to 4 heads per block (fewer registers, more
// blocks, the group's keys read once per block); kGeneric, the first
// kernel always; kMma, the tensor-core kernel (paged_attention_mma.cu:
// head_dim 64 or 128, up to 16 query heads a block, K/V staged by cp.async,
// P rounded to the dtype as flash-attention does), else as kAuto. All
// compute the same attention; the choice is speed (tests/cuda's Bandwidth
// test measures each).
enum class AttentionKernel { kAuto, kVector4, kGeneric, kMma };
std::int64_t PagedAttentionWorkspaceBytes(std::int64_t rows, std::int64_t num_heads, std::int64_t head_dim,
                                          std::int64_t max_context, std::int64_t partition_size);
int PagedAttention(void* out, const void* q, std::int64_t q_row_stride, const void* k_cache, const void* v_cache,
                   const std::int32_t* block_tables, const std::int64_t* query_start, const std::int64_t* context_lens,
                   std::int64_t num_seqs, std::int64_t rows, std::int64_t num_heads, std::int64_t num_kv_heads,
                   std::int64_t head_dim, std::int64_t block_size, std::int64_t max_blocks_per_seq,
                   std::int64_t max_context, float scale, std::int64_t partition_size, void* workspace,
                   std::int32_t* counters, DType dtype, Stream stream, AttentionKernel kernel = AttentionKernel::kAuto);

// y [rows, N] = x [rows, K] W^T + bias for group-wise 4-bit W in
// kernels/int4_weight.h's layout: packed [N, Kp / 2] bytes (Kp = K
// rounded up to 64; each 64-column block 32 bytes, byte j holding column j
// in its low nibble and j + 32 in its high one), W[n, k] = (q - zero[n, g])
// * scale[n, g] with g = k / group_size, scale float32 and zero uint8
// [N, K / group_size]; x and y contiguous 16-bit rows, x in the weight's
// column order; bias float32 [N] or null. K a multiple of 32 and of
// group_size (32, 64 or 128); 1 <= rows <= kInt4GemvMaxRows (more rows:
// dequantize and use a GEMM). Float32 accumulation; each row's result is
// the same whatever the other rows (decode alone or batched, speculative
// verification rows).
constexpr std::int64_t kInt4GemvMaxRows = 16;
int Int4Linear(void* y, const void* x, std::int64_t rows, const std::uint8_t* packed, const float* scale,
               const std::uint8_t* zero, const float* bias, std::int64_t N, std::int64_t K, std::int64_t group_size,
               DType dtype, Stream stream);

// The same product on tensor cores for 1 <= rows <= kInt4MmaMaxRows
// (int4_mma.cu; issue 57), W in Int4MmaLayout's order (kernels/int4_weight.h):
// packed [N / 16, Kp / 64, 32, 16] bytes, scale float32 and zero uint8
// [K / group_size, N]. N a multiple of 16; x and packed 16-byte aligned;
// K and group_size as Int4Linear's. Float32 sums; each row's result the
// same whatever the other rows. Not yet the CUDA op set's choice: it has
// not run on a GPU (docs/gpu.md).
constexpr std::int64_t kInt4MmaMaxRows = 64;
int Int4MmaLinear(void* y, const void* x, std::int64_t rows, const std::uint8_t* packed, const float* scale,
                  const std::uint8_t* zero, const float* bias, std::int64_t N, std::int64_t K, std::int64_t group_size,
                  DType dtype, Stream stream);

// Each row of row-major float32 logits [rows, n] (n >= 1): its max, the
// lowest id holding it and its logsumexp (logits_summary.cu: NaN ranks
// above every number, as LibTorch's max; -inf rows give -inf, rows holding
// +inf +inf). The exponentials in float32 (__expf) against the row's max,
// summed in float32 by the block.
// `packed`, when not null, gets [rows] more floats and [rows] int32: the
// chosen token's logit for a greedy row (the max again) at packed[0..rows)
// and the argmax as int32 at packed[rows..2 rows) (the sampler's one copy
// back, server/sampler/sampler.cc: logsumexp and max should then be the
// 2 rows floats just before it).
int SummarizeRows(const float* logits, std::int64_t rows, std::int64_t n, float* logsumexp, float* max,
                  std::int64_t* argmax, Stream stream, std::int32_t* packed = nullptr);

// Sampling on the device, one row of float32 logits per sequence. Per row:
// temperature <= 0 is greedy (lowest id among equal maxima); else the
// softmax of logits / temperature restricted to the top_k most likely
// (top_k <= 0: all), to the smallest most-likely set whose mass reaches
// top_p, and to tokens at least min_p times the most likely, sampled with
// the Gumbel-max trick from a counter-based generator keyed by (seed,
// offset) so a sequence's draws do not depend on the batch. The filters
// find their probability threshold by bisection (40 rounds), so tokens
// whose probabilities tie at the threshold are kept or dropped together.
int SampleRows(const float* logits, std::int64_t rows, std::int64_t vocab, const float* temperature,
               const std::int32_t* top_k, const float* top_p, const float* min_p, const std::uint64_t* seed,
               const std::uint64_t* offset, std::int64_t* out, Stream stream);

}  // namespace ropeserve::cuda
