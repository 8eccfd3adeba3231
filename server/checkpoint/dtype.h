// Element types a safetensors file can declare. Only F32, F16 and BF16 are
// loadable as weights; the others are parsed so that a file using them gets
// a precise error instead of "malformed header".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ropeserve {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// "F32" -> kF32 etc.; nullopt for names safetensors does not define.
std::optional<DType> DTypeFromSafetensorsName(std::string_view name);
const char* DTypeSafetensorsName(DType dtype);
std::size_t DTypeSize(DType dtype);
inline bool IsFloatWeightDType(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

// Conversions used by the torch-free checkpoint writer (round to nearest even).
std::uint16_t FloatToBF16(float f);
float BF16ToFloat(std::uint16_t b);
std::uint16_t FloatToF16(float f);

}  // namespace ropeserve
