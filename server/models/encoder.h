// Span models for extractive QA: ModernBertForQuestionAnswering, mirroring
// Hugging Face's modules (embeddings + norm; layers with no attn_norm in
// layer 0, fused Wqkv, RoPE per layer kind, global or sliding-window
// attention, GeGLU MLP with the fused Wi; final_norm; prediction head
// dense -> activation -> norm; classifier). f32 compute. Torch stays out of
// this header.
//
// Two paths over the same weights: ForwardReference (one window, dense
// attention with explicit masks, as HF's eager attention) and ForwardPacked
// (several windows packed without padding: linear layers over all tokens at
// once, attention per window, sliding-window layers in query blocks that
// only read their band of keys). Tests hold them equal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/checkpoint/encoder_config.h"
#include "server/common/status.h"

namespace ropeserve {

struct SpanLogits {
  std::vector<float> start;
  std::vector<float> end;
};

class EncoderQaModel {
 public:
  // `dir` holds config.json and model.safetensors. Every expected tensor is
  // checked (present, shape, floating dtype) before any is used.
  static StatusOr<std::unique_ptr<EncoderQaModel>> Load(const std::string& dir);
  ~EncoderQaModel();

  const EncoderConfig& config() const { return config_; }
  StatusOr<SpanLogits> ForwardReference(const std::vector<std::uint32_t>& ids) const;
  StatusOr<std::vector<SpanLogits>> ForwardPacked(const std::vector<std::vector<std::uint32_t>>& windows) const;

 private:
  EncoderQaModel() = default;
  Status CheckIds(const std::vector<std::uint32_t>& ids) const;
  EncoderConfig config_;
  struct Weights;
  std::unique_ptr<Weights> w_;
};

}  // namespace ropeserve
