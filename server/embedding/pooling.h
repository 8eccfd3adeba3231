// Sentence embeddings from an encoder's last hidden state, as
// sentence-transformers computes them: the pooling of modules.json's
// Pooling module (1_Pooling/config.json: CLS, mean, max or last token,
// include_prompt), the L2 normalization of its Normalize module, the
// prompts of config_sentence_transformers.json and the max_seq_length of
// sentence_bert_config.json. Without that metadata, the documented
// defaults (docs/embeddings.md): mean pooling, no prompt, the model's
// max_position_embeddings. Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "server/common/status.h"

namespace ropeserve::embedding {

enum class Pooling { kCls, kMean, kMax, kLastToken };

// "cls", "mean", "max", "lasttoken" (the names sentence-transformers and
// vLLM's --override-pooler-config use; "last" too).
StatusOr<Pooling> ParsePooling(const std::string& name);
const char* PoolingName(Pooling p);

struct EmbeddingConfig {
  Pooling pooling = Pooling::kMean;
  // false: the prompt's tokens are left out of the pooling (the Pooling
  // module's include_prompt).
  bool include_prompt = true;
  // The model's own pipeline ends with Normalize (2_Normalize). Requests
  // normalize by default anyway (as vLLM and TEI do); recorded for /v1/models.
  bool normalize = false;
  // config_sentence_transformers.json: named prompts prepended to inputs.
  std::map<std::string, std::string> prompts;
  std::string default_prompt_name;  // empty: none
  // sentence_bert_config.json's max_seq_length (longer inputs are truncated
  // or refused as the request says); unset: the model's limit.
  std::optional<std::int64_t> max_seq_length;
  // Where the pooling came from: "sentence-transformers" or "default".
  std::string source = "default";
};

// Reads the sentence-transformers metadata in `dir` (every file optional;
// those present are validated). Unimplemented, naming the module or field,
// for what the server does not compute: Dense or other modules after the
// transformer, several pooling modes at once, mean_sqrt_len / weighted mean.
StatusOr<EmbeddingConfig> LoadEmbeddingConfig(const std::string& dir);

// Pools `hidden` ([len, dim] row-major, float32) over rows [first, len):
// `first` skips a prompt's tokens (include_prompt false). The sums run in
// float64 (the reference's float32 sums round differently by at most
// len * 2^-24 relative; docs/embeddings.md).
std::vector<float> Pool(std::span<const float> hidden, std::int64_t len, std::int64_t dim, Pooling pooling,
                        std::int64_t first = 0);

// Keeps the first `dimensions` values (Matryoshka truncation); the caller
// normalizes after. InvalidArgument when dimensions < 1 or > the size.
Status Truncate(std::vector<float>& v, std::int64_t dimensions);

// v / max(||v||_2, 1e-12), as torch.nn.functional.normalize.
void Normalize(std::vector<float>& v);

}  // namespace ropeserve::embedding
