// config.json of a RoPE encoder, parsed and validated torch-free with
// Hugging Face's field names and defaults: with a span head (extractive QA)
// ModernBertForQuestionAnswering (ModernBertConfig),
// RoFormerForQuestionAnswering (RoFormerConfig), and the span heads on
// causal trunks (LlamaForQuestionAnswering & co., parsed as ModelConfig);
// with a classifier (ModernBert/RoFormerForSequenceClassification and
// ForTokenClassification, Llama/Mistral/Qwen2/Qwen3ForSequenceClassification);
// without a head (the base model, whose last hidden state embedders pool)
// ModernBertModel, RoFormerModel and the decoder trunks. The models are in
// server/models/span_model_loader.h (docs/qa.md, docs/embeddings.md,
// docs/classification.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/checkpoint/model_config.h"
#include "server/common/status.h"

namespace ropeserve {

// kDecoder: a causal decoder trunk, with a span head
// (Llama/Mistral/Qwen2/Qwen3ForQuestionAnswering), a classifier
// (…ForSequenceClassification: `score` on the last token) or none; `trunk`
// holds its config.
enum class EncoderFamily { kModernBert, kRoFormer, kDecoder };

// kSpan: a question-answering head (start/end logits per token);
// kNone: the base model (ModernBertModel, RoFormerModel, a decoder trunk),
// its last hidden state only;
// kSequence: a classifier of the whole input (…ForSequenceClassification:
// num_labels logits; with one label, a cross-encoder's relevance score);
// kToken: a classifier of every token (…ForTokenClassification).
enum class EncoderHead { kSpan, kNone, kSequence, kToken };

// How a classifier's logits become the scores an API returns, as vLLM and
// transformers decide it: softmax over the labels, sigmoid of each, or the
// logits themselves (regression).
enum class ScoreActivation { kSoftmax, kSigmoid, kIdentity };
const char* ScoreActivationName(ScoreActivation a);
// Applies `a` to one row of logits in place (softmax in float64).
void ApplyScoreActivation(ScoreActivation a, std::vector<float>& logits);

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
  // Heads: a span head has 2 labels (start, end); classifiers num_labels
  // (id2label's size, else num_labels, else 2 as Hugging Face).
  std::int64_t num_labels = 2;
  // Classifiers: id2label in index order ("LABEL_<i>" where it names none).
  std::vector<std::string> labels;
  // ModernBERT's sequence head pools "cls" (token 0) or "mean" (every token).
  std::string classifier_pooling = "cls";
  // Classifiers: /classify's activation (problem_type "regression":
  // identity, "multi_label_classification": sigmoid, else sigmoid for one
  // label and softmax for more: vLLM's rule after transformers' losses);
  // scoring pairs (/score, /rerank): sentence-transformers' CrossEncoder
  // activation_fn from config.json ("sentence_transformers" or
  // "sbert_ce_default_activation_function"), else the same default.
  ScoreActivation classify_activation = ScoreActivation::kSoftmax;
  ScoreActivation score_activation = ScoreActivation::kSoftmax;
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
// Classifiers: ModernBERT's as its span head (head.*, classifier [num_labels,
// H]); RoFormer's sequence head classifier.dense and classifier.out_proj, its
// token head classifier. Decoder heads: ExpectedTensors of the trunk
// (transformer.* and qa_outputs; model.* and score). Base models (EncoderHead::kNone): the trunk's tensors only,
// named as above; Hugging Face saves a base model without the family's
// prefix (BaseModelPrefix), and loaders accept both spellings.
std::vector<TensorSpec> ExpectedEncoderTensors(const EncoderConfig& c);

// "model." (ModernBERT) or "roformer." (RoFormer): the prefix of the trunk's
// tensors inside a model with a head (Hugging Face's base_model_prefix).
std::string BaseModelPrefix(EncoderFamily family);

}  // namespace ropeserve
