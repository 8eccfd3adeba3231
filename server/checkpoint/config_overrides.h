// vLLM's hf_overrides for a checkpoint directory: a JSON object whose keys
// replace config.json's (top level, as vLLM's config.update). The loaders
// read config.json from the directory in several places (the encoder's
// config, the decoder trunk's, the tokenizer beside them), so the override
// is applied once, as a directory: links to every file of the checkpoint
// and a merged config.json, removed when the overlay goes (the loaded
// weights stay mapped). Torch-free.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "server/common/status.h"

namespace ropeserve {

class ConfigOverlay {
 public:
  // InvalidArgument when `overrides` is not a JSON object, or the
  // directory has no config.json object to override.
  static StatusOr<ConfigOverlay> Create(const std::string& dir, const nlohmann::json& overrides);
  ConfigOverlay(ConfigOverlay&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  ConfigOverlay& operator=(ConfigOverlay&&) = delete;
  ConfigOverlay(const ConfigOverlay&) = delete;
  ~ConfigOverlay();

  // The directory to load from instead of the checkpoint's.
  const std::string& path() const { return path_; }

 private:
  explicit ConfigOverlay(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// "NAME=JSON" (serve --hf-overrides): the name and the parsed object, or
// InvalidArgument saying what is wrong.
StatusOr<std::pair<std::string, nlohmann::json>> ParseNamedOverrides(const std::string& flag);

}  // namespace ropeserve
