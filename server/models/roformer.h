// RoFormerForQuestionAnswering, ForSequenceClassification,
// ForTokenClassification and RoFormerModel (no head), mirroring Hugging Face's modules: word +
// token-type embeddings, LayerNorm, optional embeddings_project; BERT
// post-norm layers with RoFormer's rotary on q and k (and v when
// rotary_value) in the interleaved-pair layout from a sinusoidal table;
// the head (qa_outputs, classifier, or the classification head on token 0; none in the base model). float32 or bfloat16
// compute. Torch stays out of this header.
//
// Every layer is dense GEMMs and one attention per window, which is what a
// fast path would do too: both paths run the same computation.
#pragma once

#include <memory>
#include <string>

#include "server/checkpoint/dtype.h"
#include "server/checkpoint/encoder_config.h"
#include "server/common/status.h"
#include "server/models/span_model.h"

namespace ropeserve {

// `config` is the parsed config.json of `dir` (family kRoFormer).
// `device`: cpu, cuda or cuda:N (the weights and every window's tensors go there).
StatusOr<std::unique_ptr<SpanModel>> LoadRoFormer(const EncoderConfig& config, const std::string& dir, DType dtype,
                                                  const std::string& device = "cpu");

}  // namespace ropeserve
