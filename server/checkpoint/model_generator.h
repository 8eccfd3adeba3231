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
#include "server/common/status.h"

namespace ropeserve {

struct MakeModelOptions {
  std::string preset = "tiny";  // see ModelPresetNames()
  std::string arch;             // llama | qwen2 | qwen3; empty = the preset's
  std::optional<DType> dtype;   // storage dtype; default: the preset's
  std::uint64_t seed = 0;
  // Overrides of the preset's shape.
  std::optional<std::int64_t> hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim,
      vocab_size, max_position_embeddings;
  std::optional<bool> tie_word_embeddings;
  std::string rope_scaling_json;  // e.g. {"rope_type":"linear","factor":2.0}; empty = preset's
};

std::vector<std::string> ModelPresetNames();

// The config.json text MakeModel would write (validated by ParseModelConfig).
StatusOr<std::string> MakeModelConfigJson(const MakeModelOptions& options);

// Writes the checkpoint into `out_dir` (created if needed).
Status MakeModel(const std::string& out_dir, const MakeModelOptions& options);

}  // namespace ropeserve
