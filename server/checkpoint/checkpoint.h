// A Hugging Face checkpoint directory: config.json, generation_config.json,
// and model.safetensors or shards listed in model.safetensors.index.json.
// Open() validates everything a model needs (names, shapes, dtypes) against
// ExpectedTensors(config) so a bad checkpoint fails before any weight is
// read, with an error naming the file and tensor. Torch-free.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/checkpoint/model_config.h"
#include "server/checkpoint/safetensors.h"

namespace ropeserve {

class Checkpoint {
 public:
  // `as_trunk`: a decoder's trunk alone (ModelConfig::base_model; a causal
  // LM's lm_head is then ignored; a span head is refused).
  static StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir, bool as_trunk = false);

  struct TensorRef {
    const SafetensorsFile* file;
    const TensorInfo* info;
  };

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  // Only names from ExpectedTensors(config()) are guaranteed to be present.
  const TensorRef* Find(const std::string& name) const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::string dir_;
  ModelConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorRef> tensors_;
};

}  // namespace ropeserve
