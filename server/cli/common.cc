#include <cstdio>

#include "server/checkpoint/model_config.h"
#include "server/cli/commands.h"

namespace ropeserve::cli {

std::optional<DType> ParseDTypeFlag(const std::string& s) {
  if (s == "float32" || s == "f32") return DType::kF32;
  if (s == "bfloat16" || s == "bf16") return DType::kBF16;
  if (s == "float16" || s == "f16") return DType::kF16;
  return std::nullopt;  // "auto"; other values are rejected by CLI11's IsMember check
}

DType ResolveComputeDType(const std::string& flag, const std::string& model_dir) {
  if (auto d = ParseDTypeFlag(flag)) return *d;
  auto config = LoadModelConfig(model_dir);
  return config.ok() && config->torch_dtype == "bfloat16" ? DType::kBF16 : DType::kF32;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

}  // namespace ropeserve::cli
