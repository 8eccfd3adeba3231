// LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM.
// Weights keep Hugging Face's module names (DecoderLayerWeights mirrors
// model.layers.N.*), so loading is name mapping.
//
// Forwards run the fused kernels of the weights' device (DecoderOps: the
// CPU's, or CUDA's in builds that have it):
//  - ForwardPaged (PagedModel): the serving path: a packed batch of prefill
//    chunks and decode tokens over the paged KV cache;
//  - ForwardSpans: span heads over whole windows (extractive QA), or a
//    trunk's hidden state (embeddings).
// Their oracle, the dense unfused forward on kernels/reference, lives in the
// tests (tests/models/reference_decoder.h) over weights() and
// RotaryCosSin(), so the reference ops are not linked into the server.
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
#include "server/models/decoder_ops.h"
#include "server/models/paged_model.h"
#include "server/models/quantization.h"
#include "server/models/span_logits.h"

namespace ropeserve {

struct DecoderLayerWeights {
  at::Tensor input_layernorm;  // [H]
  // q_proj, k_proj, v_proj stacked: [(Hq + 2 Hkv) * D, H], q rows, then k,
  // then v; biases (Qwen2) or none. One pass over x instead of three.
  LinearWeight qkv_proj;
  at::Tensor q_norm, k_norm;            // [D] (Qwen3) or undefined
  LinearWeight o_proj;                  // [H, Hq*D]
  at::Tensor post_attention_layernorm;  // [H]
  LinearWeight gate_up_proj;            // gate_proj then up_proj: [2 I, H]
  LinearWeight down_proj;               // [H, I]
};

struct DecoderWeights {
  // [V, H] in the compute dtype; undefined when tied to an int8 or packed
  // lm_head (the embedding then reads lm_head's rows back).
  at::Tensor embed_tokens;
  std::vector<DecoderLayerWeights> layers;
  at::Tensor norm;                         // [H]
  LinearWeight lm_head;                    // [V, H] (its weight aliases embed_tokens when tied); none with a span head
  at::Tensor qa_outputs, qa_outputs_bias;  // [2, H], [2]: span head only
  at::Tensor score;                        // [num_labels, H]: sequence classifier only
};

class DecoderModel final : public PagedModel {
 public:
  // Loads and validates DIR; weights are converted to `dtype` (kF32 or kBF16),
  // the projections quantized as `quantization` says (models/quantization.h:
  // int8, int4, int4-all; a 4-bit checkpoint loads its own 4-bit weights).
  // A causal LM (lm_head); a checkpoint with a span head is refused.
  // `device`: the CPU, or a CUDA device in builds whose LibTorch has CUDA
  // (float16 or bfloat16 compute there; int8 weights are CPU-only, int4 and
  // int4-all run on both).
  static StatusOr<std::unique_ptr<DecoderModel>> Load(const std::string& dir, DType dtype,
                                                      Quantization quantization = Quantization::kNone,
                                                      at::Device device = at::kCPU);
  // The same trunk with a span head (LlamaForQuestionAnswering & co.); only
  // ForwardSpans runs on it.
  static StatusOr<std::unique_ptr<DecoderModel>> LoadSpanModel(const std::string& dir, DType dtype,
                                                               at::Device device = at::kCPU);
  // The trunk with a sequence classifier (LlamaForSequenceClassification &
  // co., `score` on the last token); only ForwardSpans runs on it.
  static StatusOr<std::unique_ptr<DecoderModel>> LoadClassifier(const std::string& dir, DType dtype,
                                                                at::Device device = at::kCPU);
  // The trunk alone (ModelConfig::base_model): a *Model checkpoint, or a
  // causal LM whose lm_head is ignored; only ForwardSpans runs on it (the
  // hidden state, no logits).
  static StatusOr<std::unique_ptr<DecoderModel>> LoadTrunk(const std::string& dir, DType dtype,
                                                           at::Device device = at::kCPU);

  const ModelConfig& config() const override { return config_; }
  at::Device device() const override { return w_.norm.device(); }
  DType dtype() const { return dtype_; }
  Quantization quantization() const { return quantization_; }
  const DecoderWeights& weights() const { return w_; }
  double attention_scale() const { return attention_scale_; }
  // RoPE cos/sin [T, rotary_dim] (compute dtype) for `positions` [T] of
  // one sequence (dynamic NTK follows the length reached: `length`, the
  // largest position + 1, when the caller knows it; 0 = read it from
  // `positions`, a device-to-host synchronization on a GPU).
  std::pair<at::Tensor, at::Tensor> RotaryCosSin(const at::Tensor& positions, std::int64_t length = 0) const;

  at::Tensor ForwardPaged(const PagedBatch& batch, PagedKvCache& cache, at::Tensor* prompt_logits) const override;
  // On CUDA, unless dynamic RoPE computes its frequencies per length on the host.
  bool CanCaptureGraphs() const override;
  at::Tensor AttentionWorkspace(const PagedBatch& batch) const override;
  // One layer's attention over the paged cache, after this step's K/V have
  // been written: q [T,Hq,D] -> [T,Hq,D].
  using PagedAttentionFn = std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k_cache,
                                                    const at::Tensor& v_cache, const PagedBatch& batch)>;
  // ForwardPaged with another attention in every layer (the tests' oracle
  // passes the gather-based reference); everything else is the same.
  at::Tensor ForwardPagedWith(const PagedBatch& batch, PagedKvCache& cache, at::Tensor* prompt_logits,
                              const PagedAttentionFn& attend) const;

  // Span head: start/end logits of each window (positions 0..len-1, causal
  // attention within the window, as Hugging Face's *ForQuestionAnswering).
  // Each window is computed on tensors of its own shape, so its logits are
  // bitwise independent of the other windows. `with_hidden` also returns
  // the trunk's last hidden state (after the final norm); a trunk without a
  // head (LoadTrunk) returns only that, a classifier (LoadClassifier) the
  // last token's logits in SpanLogits::classes.
  std::vector<SpanLogits> ForwardSpans(const std::vector<std::vector<std::int64_t>>& windows,
                                       bool with_hidden = false) const;

  PagedKvCache AllocatePagedKvCache(std::int64_t num_blocks, std::int64_t block_size) const override;
  // K and V bytes one token occupies in the cache, all layers.
  std::int64_t KvBytesPerToken() const;

 private:
  DecoderModel() = default;
  enum class Head { kLm, kSpan, kScore, kNone };
  static StatusOr<std::unique_ptr<DecoderModel>> LoadAny(const std::string& dir, DType dtype, Head head,
                                                         Quantization quantization, at::Device device);
  // Whether the checkpoint has the head asked for; the quantization it is
  // served with (a 4-bit checkpoint's own weights whatever was asked, int8
  // refused for it).
  static StatusOr<Quantization> CheckHead(const std::string& dir, const ModelConfig& c, Head head,
                                          Quantization quantization);
  at::Tensor Embed(const at::Tensor& ids) const;
  at::Tensor Logits(const at::Tensor& hidden) const;
  // Projections and per-head norm for one layer, before RoPE. Returns
  // q [T,Hq,D], k, v [T,Hkv,D] (views of the projection where no norm).
  std::tuple<at::Tensor, at::Tensor, at::Tensor> Qkv(const DecoderLayerWeights& w, const at::Tensor& x) const;
  at::Tensor Mlp(const DecoderLayerWeights& w, const at::Tensor& x) const;
  // attend(layer, q [T,Hq,D], k, v [T,Hkv,D]) -> [T,Hq,D], q and k before
  // RoPE: the only part in which the forward paths differ. It applies
  // RoPE (the paged path with its cache write, DecoderOps::
  // RopeAndWriteKvCache: one kernel on a GPU) with a table for the rows of
  // h: the op set's PrepareRope of RotaryCosSin's tables, or a view of
  // rope_cache_.
  using AttendFn = std::function<at::Tensor(std::size_t, at::Tensor, at::Tensor, const at::Tensor&)>;
  // Embedded tokens h [T,H] through every decoder layer, with the fused
  // RMSNorm/residual kernels -> {[T,H]}; with `outputs` (each [N_i] int64
  // row indices), the last layer past its attention runs for those rows
  // only, each set apart -> {[N_i,H]} in that order.
  std::vector<at::Tensor> RunLayers(at::Tensor h, const AttendFn& attend,
                                    const std::vector<at::Tensor>& outputs = {}) const;
  at::Tensor LayerTail(const DecoderLayerWeights& w, const at::Tensor& attn, at::Tensor& h) const;
  // cos/sin for rows packed as consecutive segments of `lens` rows (the
  // sequences of a paged batch); dynamic RoPE uses each segment's own length.
  std::pair<at::Tensor, at::Tensor> CosSinPacked(const PagedBatch& batch) const;
  // A paged batch's RoPE table: rope_cache_ indexed by the batch's
  // positions where there is one, else built for its rows.
  RopeTable PagedRope(const PagedBatch& batch) const;

  ModelConfig config_;
  DType dtype_ = DType::kF32;
  Quantization quantization_ = Quantization::kNone;
  DecoderWeights w_;
  std::unique_ptr<const DecoderOps> ops_;  // the weights' device's kernels
  at::Tensor inv_freq_;                    // [rotary_dim/2] float32 (unused for dynamic RoPE)
  double attention_factor_ = 1.0;
  // The device kernel's RoPE table for every position, built once at load
  // (CUDA generation models with static RoPE: float32 [max_position_embeddings, 2F],
  // 64 MB for a 128k context at head dim 128, as vLLM's cos_sin_cache), so
  // a step indexes it by position instead of computing ~14 small kernels'
  // worth of tables; undefined elsewhere.
  at::Tensor rope_cache_;
  double attention_scale_ = 1.0;  // 1 / sqrt(head_dim)
};

}  // namespace ropeserve
