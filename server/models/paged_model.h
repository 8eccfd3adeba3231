// What the model runner (server/runner/model_runner.h) needs from a causal
// LM: a paged KV cache and one forward over a packed batch of prefill
// chunks and decode tokens. DecoderModel implements it with the fused CPU
// kernels; the tests' oracle (tests/models/reference_decoder.h) implements
// it with the gather-based reference attention, so the same runner and
// engine run over either.
// Thread-safety: const methods may run concurrently on different caches.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "server/checkpoint/model_config.h"

namespace ropeserve {

// One step's packed, unpadded batch, as tensors (built by ModelRunner from
// a StepPlan). Sequence s owns rows [query_start[s], query_start[s + 1]),
// which are its last query_lens[s] tokens of context_lens[s].
struct PagedBatch {
  at::Tensor token_ids;                    // [T] int64
  at::Tensor positions;                    // [T] int64
  at::Tensor slot_mapping;                 // [T] int64: block * block_size + offset
  std::vector<std::int64_t> query_lens;    // per sequence
  std::vector<std::int64_t> context_lens;  // per sequence, incl. this step's tokens
  at::Tensor logits_indices;               // [R] int64: rows whose next-token logits are wanted
  // [P] int64: rows whose logits give prompt logprobs (undefined: none).
  // Computed apart from logits_indices' rows, so that a request asking for
  // prompt logprobs does not change the others' logits by a rounding.
  at::Tensor prompt_logits_indices;
  at::Tensor block_table_tensor;  // [S, max_blocks] int32: row s holds sequence s's blocks
  at::Tensor query_start;         // [S + 1] int64
  at::Tensor context_len_tensor;  // [S] int64
  // For attention kernels that work per query row (CUDA's): each row's
  // sequence and the cached tokens it sees, int32 [T] each (AttentionRows;
  // the runner sends them with the step's other metadata; ContiguousChunk
  // makes them on the device), and the longest context. The CPU kernels do
  // not read them.
  at::Tensor row_seq, row_context;
  std::int64_t max_context = 0;
};

// Per query row: its sequence and the cached tokens it sees (its position
// + 1: causal within the chunk after the cached prefix); the longest
// context of the batch.
struct AttentionRows {
  std::vector<std::int64_t> seq, context;
  std::int64_t max_context = 0;
};
AttentionRows MakeAttentionRows(const std::vector<std::int64_t>& query_lens,
                                const std::vector<std::int64_t>& context_lens);

// One sequence's chunk `tokens` at positions [start, start + len) over a
// cache whose first `num_blocks` blocks are the sequence's, in order (so its
// slots are its positions), with logits for every row: for offline checks
// of one sequence (bench, tests, a span model's window), not the runner's
// batches. Tensors on `device`.
PagedBatch ContiguousChunk(const std::vector<std::int64_t>& tokens, std::int64_t start, std::int64_t num_blocks,
                           at::Device device = at::kCPU);

// Paged KV cache of all sequences.
struct PagedKvCache {
  std::vector<at::Tensor> k;  // per layer [num_blocks, block_size, Hkv, D]
  std::vector<at::Tensor> v;  // per layer [num_blocks, block_size, Hkv, D]
};

class PagedModel {
 public:
  virtual ~PagedModel() = default;
  virtual const ModelConfig& config() const = 0;
  // Where the weights and the cache live; the runner builds each step's
  // tensors there.
  virtual at::Device device() const = 0;
  // num_blocks x block_size token slots of K and V for every layer.
  virtual PagedKvCache AllocatePagedKvCache(std::int64_t num_blocks, std::int64_t block_size) const = 0;
  // Writes this step's K/V into their slots, attends each sequence to its
  // cached prefix plus causally within its chunk. Returns float32 logits
  // [R, V] for batch.logits_indices; with `prompt_logits` (may be null),
  // also float32 logits [P, V] for batch.prompt_logits_indices.
  virtual at::Tensor ForwardPaged(const PagedBatch& batch, PagedKvCache& cache, at::Tensor* prompt_logits) const = 0;
};

}  // namespace ropeserve
