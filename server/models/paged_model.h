// What the model runner (server/runner/model_runner.h) needs from a causal
// LM: a paged KV cache and one forward over a packed batch of prefill
// chunks and decode tokens. DecoderModel implements it with the CPU
// kernels (kernels/cpu, one variant per ISA) or the CUDA ones
// (kernels/cuda); the tests' oracle (tests/models/reference_decoder.h) implements
// it with the gather-based reference attention, so the same runner and
// engine run over either.
// Thread-safety: const methods may run concurrently on different caches.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "server/checkpoint/model_config.h"

namespace ropeserve {

// One step's packed batch, as tensors on the worker's device and nothing
// on the host but max_context (built by ModelRunner from a StepPlan; a
// padded decode batch ends in filler sequences of one token, slot
// kPaddingSlot, whose rows nobody reads). Sequence s owns rows
// [query_start[s], query_start[s + 1]), the last tokens of its
// context_len_tensor[s].
struct PagedBatch {
  at::Tensor token_ids;       // [T] int64
  at::Tensor positions;       // [T] int64
  at::Tensor slot_mapping;    // [T] int64: block * block_size + offset
  at::Tensor logits_indices;  // [R] int64: rows whose next-token logits are wanted
  // [P] int64: rows whose logits give prompt logprobs (undefined: none).
  // Computed apart from logits_indices' rows, so that a request asking for
  // prompt logprobs does not change the others' logits by a rounding.
  at::Tensor prompt_logits_indices;
  at::Tensor block_table_tensor;  // [S, max_blocks] int32: row s holds sequence s's blocks
  at::Tensor query_start;         // [S + 1] int64
  at::Tensor context_len_tensor;  // [S] int64
  // The attention contract of every device is the three tensors above
  // (kernels/cpu/paged_attention.h, kernels/cuda/kernels.h). max_context
  // bounds every context_len_tensor entry: the batch's longest context in an
  // eager step; the cache's capacity per sequence in a step replayed from
  // a CUDA graph, whose launches cannot depend on the step's values. The
  // CPU kernels do not read it.
  std::int64_t max_context = 0;
  // Scratch the device's attention shares across the layers of one forward
  // (DecoderOps::AttentionWorkspace; undefined on the CPU).
  at::Tensor attention_workspace;
};

// Slot of a padding row (a padded batch's filler tokens): never written.
constexpr std::int64_t kPaddingSlot = -1;

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
  // Whether a decode ForwardPaged may be captured in a CUDA graph: it reads
  // nothing on the host but the batch's shape (false: the runner stays eager).
  virtual bool CanCaptureGraphs() const { return false; }
  // The attention scratch ForwardPaged needs for `batch`, when the caller
  // sets it on its own batch (PagedBatch::attention_workspace; undefined:
  // none needed, as on the CPU). Without it ForwardPaged allocates one.
  virtual at::Tensor AttentionWorkspace(const PagedBatch& batch) const { return {}; }
};

}  // namespace ropeserve
