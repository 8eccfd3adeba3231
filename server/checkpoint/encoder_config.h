// config.json of a RoPE encoder, parsed and validated torch-free with
// Hugging Face's field names and defaults: with a span head (extractive QA)
// ModernBertForQuestionAnswering (ModernBertConfig),
// RoFormerForQuestionAnswering (RoFormerConfig), and the span heads on
// causal trunks (LlamaForQuestionAnswering & co., parsed as ModelConfig);
// without a head (the base model, whose last hidden state embedders pool)
// ModernBertModel and RoFormerModel. The models are in
// server/models/span_model_loader.h (docs/qa.md, docs/embeddings.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/checkpoint/model_config.h"
#include "server/common/status.h"

namespace ropeserve {

// kDecoder: a causal decoder trunk with a span head
// (Llama/Mistral/Qwen2/Qwen3ForQuestionAnswering); `trunk` holds its config.
enum class EncoderFamily { kModernBert, kRoFormer, kDecoder };

// kSpan: a question-answering head (start/end logits per token);
// kNone: the base model (ModernBertModel, RoFormerModel), its last hidden
// state only.
enum class EncoderHead { kSpan, kNone };

struct EncoderConfig {
  std::string architecture;  // config.json "architectures"[0]
  EncoderFamily family = EncoderFamily::kModernBert;
  EncoderHead head = EncoderHead::kSpan;
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t embedding_size = 0;  // RoFormer: may differ from hidden_size (projected)
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t max_position_embeddings = 0;
  std::int64_t type_vocab_size = 0;  // RoFormer token types; 0 for ModernBERT
  std::string activation;            // hidden_activation / hidden_act
  double norm_eps = 0;               // norm_eps / layer_norm_eps
  // ModernBERT
  bool norm_bias = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  bool classifier_bias = false;
  std::string classifier_activation;
  std::vector<bool> global_layers;   // per layer: full attention (else sliding window)
  std::int64_t local_attention = 0;  // total window; each token sees +-local_attention/2
  double global_rope_theta = 0;
  double local_rope_theta = 0;
  // RoFormer
  bool rotary_value = false;
  // Span head
  std::int64_t num_labels = 2;
  std::optional<std::int64_t> pad_token_id, cls_token_id, sep_token_id;
  // kDecoder only: the trunk's full config (server/models/decoder loads it).
  std::optional<ModelConfig> trunk;
};

// `source` names the file in errors. Unimplemented for other architectures
// and for RoPE scaling types other than "default".
StatusOr<EncoderConfig> ParseEncoderConfig(const std::string& json_text, const std::string& source = "config.json");

// The tensors of a span-model checkpoint, in Hugging Face names.
// ModernBERT: model.embeddings.*, model.layers.N.{attn_norm (not in layer
// 0), attn.Wqkv, attn.Wo, mlp_norm, mlp.Wi, mlp.Wo}, model.final_norm,
// head.{dense, norm}, classifier (biases as the config says). RoFormer:
// roformer.embeddings.{word_embeddings, token_type_embeddings, LayerNorm},
// roformer.embeddings_project (when embedding_size != hidden_size),
// roformer.encoder.layer.N.{attention.self.{query,key,value},
// attention.output.{dense,LayerNorm}, intermediate.dense,
// output.{dense,LayerNorm}}, qa_outputs. (The sinusoidal table
// roformer.encoder.embed_positions.weight is computed, not read.)
// Decoder span heads: ExpectedTensors of the trunk (transformer.*) and
// qa_outputs. Base models (EncoderHead::kNone): the trunk's tensors only,
// named as above; Hugging Face saves a base model without the family's
// prefix (BaseModelPrefix), and loaders accept both spellings.
std::vector<TensorSpec> ExpectedEncoderTensors(const EncoderConfig& c);

// "model." (ModernBERT) or "roformer." (RoFormer): the prefix of the trunk's
// tensors inside a model with a head (Hugging Face's base_model_prefix).
std::string BaseModelPrefix(EncoderFamily family);

}  // namespace ropeserve
