// Span models for extractive QA, mirroring Hugging Face's modules, float32
// or bfloat16 compute; torch stays out of this header.
//  - ModernBertForQuestionAnswering: embeddings + norm; layers with no
//    attn_norm in layer 0, fused Wqkv, rotate-half RoPE per layer kind,
//    global or sliding-window attention, GeGLU MLP with the fused Wi;
//    final_norm; prediction head dense -> activation -> norm; classifier.
//  - Llama/Mistral/Qwen2/Qwen3ForQuestionAnswering: the causal decoder
//    (server/models/decoder) with qa_outputs on its final hidden states.
//  - RoFormerForQuestionAnswering: word + token-type embeddings, LayerNorm,
//    optional embeddings_project; BERT post-norm layers with RoFormer's
//    rotary on q and k (and v when rotary_value) in the interleaved-pair
//    layout from a sinusoidal table; qa_outputs.
//
// Two paths over the same weights: ForwardReference (one window, dense
// attention with explicit masks, as HF's eager attention) and ForwardWindows
// (the serving path: several windows per call, fused kernels where the
// family has them, sliding-window layers in query blocks that only read
// their band of keys). Tests hold them equal within rounding.
//
// Batch invariance: ForwardWindows computes every window on tensors of that
// window's own shape, so a window's logits are bitwise the same whatever
// else is in the call (GEMM libraries round a row differently depending on
// the matrix it sits in; OpenBLAS does).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/checkpoint/dtype.h"
#include "server/checkpoint/encoder_config.h"
#include "server/common/status.h"
#include "server/models/span_logits.h"
#include "server/models/span_model.h"

namespace ropeserve {

class DecoderModel;

class EncoderQaModel final : public SpanModel {
 public:
  // `dir` holds config.json and model.safetensors. Every expected tensor is
  // checked (present, shape, floating dtype) before any is used. Compute in
  // float32 (the exact path) or bfloat16 (2-4x faster GEMMs on CPUs with
  // AVX-512-BF16; attention softmax in float32 as Hugging Face's eager
  // attention).
  static StatusOr<std::unique_ptr<EncoderQaModel>> Load(const std::string& dir, DType dtype = DType::kF32);
  ~EncoderQaModel() override;

  const EncoderConfig& config() const override { return config_; }
  struct Weights;  // opaque: the tensors by name
  // `type_ids` (token types, RoFormer) may be empty: all 0 (the other
  // families ignore them). `with_hidden` also returns the trunk's last
  // hidden state (Hugging Face's base-model last_hidden_state).
  StatusOr<SpanLogits> ForwardReference(const std::vector<std::uint32_t>& ids,
                                        const std::vector<std::uint32_t>& type_ids = {},
                                        bool with_hidden = false) const;
  StatusOr<std::vector<SpanLogits>> ForwardWindows(const std::vector<std::vector<std::uint32_t>>& windows,
                                                  const std::vector<std::vector<std::uint32_t>>& type_ids = {},
                                                  bool with_hidden = false) const override;

 private:
  EncoderQaModel() = default;
  Status CheckIds(const std::vector<std::uint32_t>& ids, const std::vector<std::uint32_t>& type_ids) const;
  EncoderConfig config_;
  std::unique_ptr<Weights> w_;
  std::unique_ptr<DecoderModel> decoder_;  // kDecoder: the causal trunk with its span head
};

}  // namespace ropeserve
