// RoPE inverse frequencies and attention scaling, computed from a config
// exactly as Hugging Face's modeling_rope_utils.py does (in double precision;
// the model casts to float32 as Hugging Face's buffers are). Torch-free so the
// formulas are unit-tested without a model.
#pragma once

#include <cstdint>
#include <vector>

#include "server/checkpoint/model_config.h"

namespace ropeserve {

struct RopeFrequencies {
  std::vector<double> inv_freq;   // [rotary_dim / 2]
  double attention_factor = 1.0;  // multiplies cos and sin (yarn)
};

// `seq_len` is the length of the sequence being processed; only the
// "dynamic" (NTK) type depends on it, and only above max_position_embeddings.
RopeFrequencies ComputeRopeFrequencies(const ModelConfig& config, std::int64_t seq_len = 0);

// True when the frequencies depend on seq_len (so a cache of cos/sin per
// position is not valid across lengths).
inline bool RopeDependsOnLength(const ModelConfig& config) { return config.rope_scaling.type == "dynamic"; }

}  // namespace ropeserve
