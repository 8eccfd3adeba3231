// `ropeserve make-model`: deterministic random-weight checkpoints in Hugging
// Face layout (config.json, generation_config.json, model.safetensors,
// tokenizer.json, tokenizer_config.json) for every supported architecture.
// Used for tests, the demo model and benchmarks at real-model shapes.
// Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/checkpoint/dtype.h"
#include "server/checkpoint/int4_checkpoint.h"
#include "server/common/status.h"

namespace ropeserve {

struct MakeModelOptions {
  std::string preset = "tiny";  // see ModelPresetNames()
  std::string arch;             // llama | qwen2 | qwen3; empty = the preset's
  std::optional<DType> dtype;   // storage dtype; default: the preset's
  std::uint64_t seed = 0;
  // Overrides of the preset's shape.
  std::optional<std::int64_t> hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim, vocab_size,
      max_position_embeddings;
  std::optional<bool> tie_word_embeddings;
  std::string rope_scaling_json;  // e.g. {"rope_type":"linear","factor":2.0}; empty = preset's
  // Write the decoder projections as a 4-bit checkpoint of this format
  // (GPTQ, AWQ, compressed-tensors; server/checkpoint/int4_writer.h): each
  // quantized from the float32 weights this seed gives a float checkpoint
  // (the same values as `dtype` float32 writes), with its
  // quantization_config in config.json. Other tensors as without it.
  std::optional<Int4Checkpoint> int4;
};

std::vector<std::string> ModelPresetNames();

// The config.json text MakeModel would write (validated by ParseModelConfig).
StatusOr<std::string> MakeModelConfigJson(const MakeModelOptions& options);

// Writes the checkpoint into `out_dir` (created if needed).
Status MakeModel(const std::string& out_dir, const MakeModelOptions& options);

// A random ModernBertForQuestionAnswering, RoFormerForQuestionAnswering or
// Llama/Qwen2/Qwen3ForQuestionAnswering (trunk "transformer.*", qa_outputs;
// half as many KV heads as query heads) checkpoint (config.json in
// Hugging Face's format, model.safetensors with its tensor names, a
// byte-level BPE tokenizer.json with [CLS] A [SEP] B [SEP] pairs, and a
// tokenizer_config.json naming [CLS]/[SEP]/[PAD]). ModernBERT: every third
// layer is global, the others see +-local_attention/2 tokens.
struct MakeEncoderOptions {
  std::string arch = "modernbert";  // modernbert | roformer | llama | qwen2 | qwen3
  std::uint64_t seed = 0;
  std::int64_t hidden_size = 64;
  std::int64_t intermediate_size = 96;
  std::int64_t num_layers = 4;
  std::int64_t num_heads = 4;
  std::int64_t vocab_size = 512;
  std::int64_t local_attention = 16;
  std::int64_t max_position_embeddings = 1024;
  DType dtype = DType::kF32;
  // "qa": a span head (…ForQuestionAnswering); "embedding": the base model
  // (ModernBertModel, RoFormerModel, LlamaModel, Qwen2Model, Qwen3Model;
  // tensors without the family prefix, as Hugging Face saves a base model)
  // with sentence-transformers metadata: modules.json, 1_Pooling/config.json
  // (`pooling`: cls, mean, max, lasttoken, or auto: mean for encoders, the
  // last token for decoders), 2_Normalize, config_sentence_transformers.json
  // (prompts "query" and "document"), sentence_bert_config.json.
  // "sequence": a classifier (…ForSequenceClassification) with `labels`
  // as id2label (one label: a cross-encoder reranker, its config naming
  // sentence-transformers' Sigmoid activation); "token": a token
  // classifier (ModernBert/RoFormerForTokenClassification).
  std::string head = "qa";
  std::string pooling = "auto";
  std::vector<std::string> labels = {"negative", "positive"};
};
Status MakeEncoderModel(const std::string& out_dir, const MakeEncoderOptions& options);

}  // namespace ropeserve
