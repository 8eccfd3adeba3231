// config.json (+ generation_config.json) of a Hugging Face decoder checkpoint
// (LlamaForCausalLM & co., or the same trunk with a span head:
// LlamaForQuestionAnswering & co.),
// parsed and validated once, torch-free. Everything the model code needs to
// know about a checkpoint's shape lives here, including the list of tensors
// it must contain (ExpectedTensors), which both the loader and the
// `make-model` generator use.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/checkpoint/int4_checkpoint.h"
#include "server/checkpoint/tensor_spec.h"
#include "server/common/status.h"

namespace ropeserve {

enum class ModelFamily { kLlama, kQwen2, kQwen3 };
const char* ModelFamilyName(ModelFamily f);

// rope_scaling / rope_parameters, with Hugging Face's defaults.
struct RopeScaling {
  std::string type = "default";  // default | linear | dynamic | llama3 | yarn
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 and yarn: the context the model was pre-trained with
  // (0 = use max_position_embeddings).
  std::int64_t original_max_position_embeddings = 0;
  // yarn
  std::optional<double> attention_factor;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  bool truncate = true;
};

struct ModelConfig {
  std::string architecture;  // as in config.json "architectures"[0]
  ModelFamily family = ModelFamily::kLlama;
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;  // from config, else hidden_size / heads
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;     // Qwen2 always; Llama/Qwen3 when attention_bias
  bool o_proj_bias = false;  // Llama/Qwen3 when attention_bias
  bool mlp_bias = false;     // Llama mlp_bias
  bool qk_norm = false;      // Qwen3 per-head RMSNorm on q and k
  std::string torch_dtype;   // informational ("float32", "bfloat16", ...)
  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_ids;  // generation_config overrides config
  // *ForQuestionAnswering: a span head (qa_outputs [2, H] + bias) on the
  // causal trunk instead of lm_head; Hugging Face names that trunk
  // "transformer." (older checkpoints "model."; Checkpoint::Open decides).
  bool span_head = false;
  // *ForSequenceClassification: `score` [num_labels, H] (no bias) on the
  // last token's hidden state instead of lm_head; the trunk is "model.".
  bool sequence_head = false;
  std::int64_t num_labels = 0;  // sequence_head: id2label's size, else num_labels, else 2
  // vLLM's classifier from a causal LM (its hf_overrides keys): `score` is
  // built at load from the LM head's rows of these tokens (the checkpoint
  // holds lm_head, not score); with is_original_qwen3_reranker the tokens
  // are [no, yes] and the one label's weight is lm_head[yes] - lm_head[no]
  // (Qwen3-Reranker: sigmoid of it is the probability of "yes").
  std::vector<std::string> classifier_from_token;
  bool original_qwen3_reranker = false;
  // The trunk alone, no head: *Model (LlamaModel, Qwen3Model, ...) as
  // Hugging Face saves a base model (tensors without a prefix), or a causal
  // LM opened as a trunk (Checkpoint::Open's as_trunk: sentence embedders
  // such as Qwen3-Embedding declare Qwen3ForCausalLM). Its last hidden state
  // is pooled; it cannot generate.
  bool base_model = false;
  std::string trunk_prefix = "model.";
  // quantization_config: the decoder projections are stored as 4-bit
  // integers (GPTQ, AWQ or compressed-tensors); nullopt for float weights.
  std::optional<Int4Checkpoint> int4_weights;

  std::int64_t rotary_dim() const {
    return static_cast<std::int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
  }
  std::int64_t q_size() const { return num_attention_heads * head_dim; }
  std::int64_t kv_size() const { return num_key_value_heads * head_dim; }
  std::int64_t num_parameters() const;
};

// Parses config.json text. `source` names the file in error messages.
StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source);

// Reads DIR/config.json and, when present, DIR/generation_config.json
// (whose eos_token_id, an int or a list, takes precedence).
StatusOr<ModelConfig> LoadModelConfig(const std::string& dir);

// The tensors a checkpoint of this config holds, in Hugging Face names
// (lm_head.weight only when embeddings are not tied; a 4-bit checkpoint's
// projections as its format stores them, Int4TensorSpecs).
std::vector<TensorSpec> ExpectedTensors(const ModelConfig& config);

// Tensors some exporters write that carry nothing we need (e.g. the rotary
// inv_freq buffer of old Llama checkpoints, or the all-zero biases GPTQ
// exporters write for projections that have none, which vLLM skips too);
// the loader skips them.
bool IsIgnorableTensor(const std::string& name, const ModelConfig& config);

}  // namespace ropeserve
