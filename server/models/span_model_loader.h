// Span models for extractive QA, loaded by the architecture their
// config.json names:
//  - ModernBertForQuestionAnswering (server/models/modernbert.h);
//  - RoFormerForQuestionAnswering (server/models/roformer.h);
//  - Llama/Mistral/Qwen2/Qwen3ForQuestionAnswering: the causal decoder
//    (server/models/decoder.h) with qa_outputs on its final hidden states,
//    positions restarting in every window, causal within it;
//  - classifiers: ModernBert/RoFormerForSequenceClassification and
//    ForTokenClassification, Llama/Mistral/Qwen2/Qwen3ForSequenceClassification
//    (`score` on the last token); their logits in SpanLogits::classes;
//  - without a head (embedders): ModernBertModel, RoFormerModel, and the
//    decoder trunks (Llama/Mistral/Qwen2/Qwen3Model, or a causal LM whose
//    lm_head is ignored).
// Each has two paths over the same weights (SpanModel::ForwardReference and
// ForwardWindows; the decoder trunks' reference lives in the tests,
// tests/models/reference_decoder.h); tests hold them equal within rounding,
// and a window's logits are bitwise the same whatever else is in the call. Torch stays
// out of this header.
#pragma once

#include <memory>
#include <string>

#include "server/checkpoint/dtype.h"
#include "server/common/status.h"
#include "server/models/span_model.h"

namespace ropeserve {

// `dir` holds config.json and the weights. Every expected tensor is checked
// (present, shape, floating dtype) before any is used. Compute in float32
// (the exact path) or bfloat16 (2-4x faster GEMMs on CPUs with
// AVX-512-BF16; attention softmax in float32 as Hugging Face's eager
// attention).
// `device`: cpu, or cuda / cuda:N in builds with CUDA (a decoder span
// model there computes in float16 or bfloat16, as CUDA decoders do).
StatusOr<std::unique_ptr<SpanModel>> LoadSpanModel(const std::string& dir, DType dtype = DType::kF32,
                                                   const std::string& device = "cpu");

}  // namespace ropeserve
