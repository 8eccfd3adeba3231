#include "server/serving/compute_dtype.h"

#include <spdlog/spdlog.h>

#include "kernels/cpu/kernel_table.h"
#include "server/checkpoint/model_config.h"

namespace ropeserve {

std::optional<DType> ParseDTypeFlag(const std::string& s) {
  if (s == "float32" || s == "f32") return DType::kF32;
  if (s == "bfloat16" || s == "bf16") return DType::kBF16;
  if (s == "float16" || s == "f16") return DType::kF16;
  return std::nullopt;  // "auto"; other values are rejected by CLI11's IsMember check
}

DType ResolveComputeDType(const std::string& flag, const std::string& model_dir, bool cpu) {
  if (auto d = ParseDTypeFlag(flag)) return *d;
  auto config = LoadModelConfig(model_dir);
  if (!config.ok() || config->torch_dtype != "bfloat16") return DType::kF32;
  // bfloat16 only where it is fast: on the CPU, an ISA with a vector bf16
  // GEMM (the generic variant is the scalar reference, many times slower
  // than LibTorch's float32 GEMM).
  if (cpu && !cpu::ActiveKernels().vector_bf16_gemm) {
    spdlog::info(
        "--dtype auto: float32 compute for a bfloat16 checkpoint: the {} CPU kernels have no vector "
        "bfloat16 GEMM",
        cpu::IsaName(cpu::ActiveIsa()));
    return DType::kF32;
  }
  return DType::kBF16;
}

}  // namespace ropeserve
