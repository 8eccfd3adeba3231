// ModernBertForQuestionAnswering, ForSequenceClassification (on token 0
// or the mean, as classifier_pooling says), ForTokenClassification and
// ModernBertModel (no head), mirroring Hugging Face's modules:
// embeddings + norm; layers with no attn_norm in layer 0, the fused Wqkv,
// rotate-half RoPE with a theta per layer kind, global or sliding-window
// attention, the GeGLU MLP with the fused Wi; final_norm; the prediction
// head (dense -> activation -> norm); classifier (not in the base model). float32 or bfloat16
// compute (attention softmax in float32). Torch stays out of this header.
//
// The reference path builds Hugging Face's dense masks; the serving path
// runs sliding-window layers in query blocks that read only their band of
// keys. Tests hold them equal within rounding.
#pragma once

#include <memory>
#include <string>

#include "server/checkpoint/dtype.h"
#include "server/checkpoint/encoder_config.h"
#include "server/common/status.h"
#include "server/models/span_model.h"

namespace ropeserve {

// `config` is the parsed config.json of `dir` (family kModernBert).
// `device`: cpu, cuda or cuda:N (the weights and every window's tensors go there).
StatusOr<std::unique_ptr<SpanModel>> LoadModernBert(const EncoderConfig& config, const std::string& dir, DType dtype,
                                                    const std::string& device = "cpu");

}  // namespace ropeserve
