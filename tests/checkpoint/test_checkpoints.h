// Helpers shared by the tests: scratch directories, small generated
// checkpoints, and raw safetensors files for corrupting on purpose.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "server/checkpoint/model_generator.h"
#include "server/checkpoint/safetensors.h"
#include "tests/common/scratch_dir.h"

namespace ropeserve::testing {

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

// Every tensor of a safetensors file, copied out.
std::vector<TensorToWrite> ReadAll(const std::string& path);
// The file's tensors, edited by `edit`, written back.
void Rewrite(const std::string& path, const std::function<void(std::vector<TensorToWrite>&)>& edit);

}  // namespace ropeserve::testing
