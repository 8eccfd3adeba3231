// Helpers shared by the tests: scratch directories, small generated
// checkpoints, and raw safetensors files for corrupting on purpose.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "server/checkpoint/model_generator.h"

namespace ropeserve::testing {

// A fresh directory under $TMPDIR, removed when the object goes away.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A tiny random checkpoint (hidden 64, 2 layers, vocab 300) of `arch`.
MakeModelOptions TinyOptions(const std::string& arch = "llama");
void MakeTinyCheckpoint(const std::string& dir, const MakeModelOptions& options);

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& contents);
nlohmann::json ReadJson(const std::string& path);
void WriteJson(const std::string& path, const nlohmann::json& j);

// Writes <8-byte length><header><data> exactly as given (no validation).
void WriteRawSafetensors(const std::string& path, const std::string& header, const std::string& data);

std::string TestData(const std::string& relative);

}  // namespace ropeserve::testing
