// Weight quantization chosen at load (`--quantization`). Torch-free: the
// CLI, the service's info and the bench name it without LibTorch.
#pragma once

#include <optional>
#include <string_view>

namespace ropeserve {

enum class Quantization {
  kNone,  // weights in the compute dtype
  // Every decoder projection and the LM head as per-output-channel
  // symmetric int8 (kernels/cpu/int8_linear.h), quantized at load from the
  // checkpoint's floating weights; norms, biases and the KV cache stay in
  // the compute dtype.
  kInt8,
};

inline std::optional<Quantization> ParseQuantization(std::string_view name) {
  if (name == "none") return Quantization::kNone;
  if (name == "int8") return Quantization::kInt8;
  return std::nullopt;
}

inline const char* QuantizationName(Quantization q) { return q == Quantization::kInt8 ? "int8" : "none"; }

}  // namespace ropeserve
