// LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM.
// Weights keep Hugging Face's module names (DecoderLayerWeights mirrors
// model.layers.N.*), so loading is name mapping.
//
// Two forward paths compute the same function:
//  - ForwardReference: dense causal attention over the whole sequence, no
//    cache, no batching, unfused ops; the oracle in tests.
//  - ForwardPaged: the serving path: a packed batch of prefill chunks and
//    decode tokens over the paged KV cache, with the fused CPU kernels.
// (ForwardSpans runs span heads on either path.)
// Thread-safety: a loaded model is immutable; forwards may run concurrently
// on different caches.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/checkpoint/checkpoint.h"
#include "server/checkpoint/rope.h"
#include "server/models/span_logits.h"

namespace ropeserve {

struct DecoderLayerWeights {
  at::Tensor input_layernorm;           // [H]
  at::Tensor q_proj, k_proj, v_proj;    // [Hq*D, H], [Hkv*D, H], [Hkv*D, H]
  at::Tensor q_bias, k_bias, v_bias;    // [Hq*D], [Hkv*D], [Hkv*D] or undefined
  at::Tensor q_norm, k_norm;            // [D] (Qwen3) or undefined
  at::Tensor o_proj;                    // [H, Hq*D]
  at::Tensor o_bias;                    // [H] or undefined
  at::Tensor post_attention_layernorm;  // [H]
  at::Tensor gate_proj, up_proj;        // [I, H]
  at::Tensor down_proj;                 // [H, I]
  at::Tensor gate_bias, up_bias, down_bias;  // [I], [I], [H] or undefined
};

struct DecoderWeights {
  at::Tensor embed_tokens;  // [V, H]
  std::vector<DecoderLayerWeights> layers;
  at::Tensor norm;          // [H]
  at::Tensor lm_head;       // [V, H] (aliases embed_tokens when tied); undefined with a span head
  at::Tensor qa_outputs, qa_outputs_bias;  // [2, H], [2]: span head only
};

// One step's packed, unpadded batch, as tensors (built by ModelRunner from
// a StepPlan). Sequence s owns rows [sum(query_lens[<s]), +query_lens[s]).
struct PagedBatch {
  at::Tensor token_ids;     // [T] int64
  at::Tensor positions;     // [T] int64
  at::Tensor slot_mapping;  // [T] int64: block * block_size + offset
  std::vector<std::vector<std::int32_t>> block_tables;  // per sequence
  std::vector<std::int64_t> query_lens;                 // per sequence
  std::vector<std::int64_t> context_lens;               // per sequence, incl. this step's tokens
  at::Tensor logits_indices;  // [R] int64: rows whose next-token logits are wanted
  // [P] int64: rows whose logits give prompt logprobs (undefined: none).
  // Computed apart from logits_indices' rows, so that a request asking for
  // prompt logprobs does not change the others' logits by a rounding.
  at::Tensor prompt_logits_indices;
  // The same layout as tensors, for the CPU kernel.
  at::Tensor block_table_tensor;  // [S, max_blocks] int32
  at::Tensor query_start;         // [S + 1] int64
  at::Tensor context_len_tensor;  // [S] int64
  // true: the gather-based reference attention (kernels/reference), the
  // oracle; false: the CPU kernel (kernels/cpu).
  bool reference_attention = false;
};

// Paged KV cache of all sequences.
struct PagedKvCache {
  std::vector<at::Tensor> k;  // per layer [num_blocks, block_size, Hkv, D]
  std::vector<at::Tensor> v;  // per layer [num_blocks, block_size, Hkv, D]
};

class DecoderModel {
 public:
  // Loads and validates DIR; weights are converted to `dtype` (kF32 or kBF16).
  // A causal LM (lm_head); a checkpoint with a span head is refused.
  static StatusOr<std::unique_ptr<DecoderModel>> Load(const std::string& dir, DType dtype);
  // The same trunk with a span head (LlamaForQuestionAnswering & co.); only
  // ForwardSpans runs on it.
  static StatusOr<std::unique_ptr<DecoderModel>> LoadSpanModel(const std::string& dir, DType dtype);

  const ModelConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }

  // ids: [T] int64, positions 0..T-1. Returns float32 logits [T, V].
  at::Tensor ForwardReference(const at::Tensor& ids) const;

  // Packed batch over the paged cache: writes this step's K/V into their
  // slots, attends each sequence to its cached prefix plus causally within
  // its chunk. Returns float32 logits [R, V] for batch.logits_indices.
  // With `prompt_logits`, also float32 logits [P, V] for
  // batch.prompt_logits_indices.
  at::Tensor ForwardPaged(const PagedBatch& batch, PagedKvCache& cache, at::Tensor* prompt_logits = nullptr) const;

  // Span head: start/end logits of each window (positions 0..len-1, causal
  // attention within the window, as Hugging Face's *ForQuestionAnswering).
  // `reference`: ForwardReference's unfused ops; else the fused kernels.
  // Either way each window is computed on tensors of its own shape, so its
  // logits are bitwise independent of the other windows. `with_hidden` also
  // returns the trunk's last hidden state (after the final norm).
  std::vector<SpanLogits> ForwardSpans(const std::vector<std::vector<std::int64_t>>& windows, bool reference,
                                       bool with_hidden = false) const;

  PagedKvCache AllocatePagedKvCache(std::int64_t num_blocks, std::int64_t block_size) const;
  // K and V bytes one token occupies in the cache, all layers.
  std::int64_t KvBytesPerToken() const;

 private:
  DecoderModel() = default;
  static StatusOr<std::unique_ptr<DecoderModel>> LoadAny(const std::string& dir, DType dtype, bool span_head);
  at::Tensor Embed(const at::Tensor& ids) const;
  at::Tensor Logits(const at::Tensor& hidden, bool fast = true) const;
  // The final RMSNorm: the fused kernel when `fast` and it applies, else the reference op.
  at::Tensor FinalNorm(const at::Tensor& hidden, bool fast) const;
  // Projections, per-head norm and RoPE for one layer. Returns q [T,Hq,D], k, v [T,Hkv,D].
  std::tuple<at::Tensor, at::Tensor, at::Tensor> QkvWithRope(const DecoderLayerWeights& w, const at::Tensor& x,
                                                             const at::Tensor& cos, const at::Tensor& sin,
                                                             bool fused) const;
  // Whether the fused CPU kernels (kernels/cpu/fused_ops.h) can run on h.
  bool FusedKernelsApply(const at::Tensor& h) const;
  at::Tensor Mlp(const DecoderLayerWeights& w, const at::Tensor& x, bool fused) const;
  // attend(layer, q [T,Hq,D], k, v [T,Hkv,D]) -> [T,Hq,D]: the only part in
  // which the forward paths differ.
  using AttendFn = std::function<at::Tensor(std::size_t, const at::Tensor&, const at::Tensor&, const at::Tensor&)>;
  // Embedded tokens h [T,H] through every decoder layer -> [T,H]. `fused`
  // uses the fused RMSNorm/residual and RoPE kernels (the paged and span
  // paths); the reference path keeps the unfused reference ops.
  at::Tensor RunLayers(at::Tensor h, const at::Tensor& cos, const at::Tensor& sin, const AttendFn& attend,
                       bool fused = true) const;
  std::pair<at::Tensor, at::Tensor> CosSin(const at::Tensor& positions) const;
  // cos/sin for rows packed as consecutive segments of `lens` rows (the
  // sequences of a paged batch); dynamic RoPE uses each segment's own length.
  std::pair<at::Tensor, at::Tensor> CosSinPacked(const at::Tensor& positions, const std::vector<std::int64_t>& lens) const;

  ModelConfig config_;
  DType dtype_ = DType::kF32;
  DecoderWeights w_;
  at::Tensor inv_freq_;  // [rotary_dim/2] float32 (unused for dynamic RoPE)
  double attention_factor_ = 1.0;
  double attention_scale_ = 1.0;  // 1 / sqrt(head_dim)
};

}  // namespace ropeserve
