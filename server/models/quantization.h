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
  // Every decoder projection as group-wise 4-bit weights
  // (kernels/int4_weight.h: groups of 128 columns, or 64 / 32 where the
  // input size needs it; round to nearest, asymmetric), quantized at load;
  // a projection whose input size is not a multiple of 32 stays int8.
  // The LM head (and a tied embedding, read back from it) stays int8: the
  // logits are what sampling and greedy choices read, and the head is a
  // small share of a decoder's bytes past ~1B parameters.
  // A GPTQ / AWQ / compressed-tensors checkpoint is served this way
  // whatever the flag (but int8 and int4-all): its own levels, scales and
  // zeros.
  kInt4,
  // kInt4 with the LM head (and a tied embedding) at 4 bits too, groups as
  // the projections'. Opt-in: in a small model the head is most of a
  // step's bytes (Qwen2.5-0.5B: 41% of kInt4's), so batch-1 decode reads
  // ~1.2x fewer bytes, but the logits themselves carry 4-bit rounding
  // (llama.cpp's Q4_0 / Q4_K_M keep theirs at 6 bits); docs/benchmarks.md
  // has both figures. With a 4-bit checkpoint: its projections as stored,
  // its float head quantized at load.
  kInt4All,
};

inline std::optional<Quantization> ParseQuantization(std::string_view name) {
  if (name == "none") return Quantization::kNone;
  if (name == "int8") return Quantization::kInt8;
  if (name == "int4") return Quantization::kInt4;
  if (name == "int4-all") return Quantization::kInt4All;
  return std::nullopt;
}

inline const char* QuantizationName(Quantization q) {
  switch (q) {
    case Quantization::kInt8:
      return "int8";
    case Quantization::kInt4:
      return "int4";
    case Quantization::kInt4All:
      return "int4-all";
    case Quantization::kNone:
      break;
  }
  return "none";
}

// Whether the decoder projections are 4-bit.
inline bool IsInt4(Quantization q) { return q == Quantization::kInt4 || q == Quantization::kInt4All; }

}  // namespace ropeserve
