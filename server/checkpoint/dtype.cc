#include "server/checkpoint/dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ropeserve {

namespace {
struct NameEntry {
  const char* name;
  DType dtype;
  std::size_t size;
};
constexpr NameEntry kNames[] = {
    {"F64", DType::kF64, 8}, {"F32", DType::kF32, 4},   {"F16", DType::kF16, 2}, {"BF16", DType::kBF16, 2},
    {"I64", DType::kI64, 8}, {"I32", DType::kI32, 4},   {"I16", DType::kI16, 2}, {"I8", DType::kI8, 1},
    {"U8", DType::kU8, 1},   {"BOOL", DType::kBool, 1},
};
}  // namespace

std::optional<DType> DTypeFromSafetensorsName(std::string_view name) {
  for (const auto& e : kNames)
    if (name == e.name) return e.dtype;
  return std::nullopt;
}

const char* DTypeSafetensorsName(DType dtype) {
  for (const auto& e : kNames)
    if (e.dtype == dtype) return e.name;
  return "?";
}

std::size_t DTypeSize(DType dtype) {
  for (const auto& e : kNames)
    if (e.dtype == dtype) return e.size;
  return 0;
}

std::uint16_t FloatToBF16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(bits >> 16);
}

float BF16ToFloat(std::uint16_t b) {
  std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::uint16_t FloatToF16(float f) {
  // IEEE binary16, round to nearest even; handles subnormals, inf and nan.
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  std::uint32_t sign = (x >> 16) & 0x8000;
  std::uint32_t mant = x & 0x7fffff;
  int exp = static_cast<int>((x >> 23) & 0xff);
  if (exp == 0xff) return static_cast<std::uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  int e = exp - 127 + 15;
  if (e >= 0x1f) return static_cast<std::uint16_t>(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000;
    int shift = 14 - e;
    std::uint32_t half = mant >> shift;
    std::uint32_t rem = mant & ((1u << shift) - 1);
    std::uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  std::uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into exp: correct
  return static_cast<std::uint16_t>(sign | half);
}

}  // namespace ropeserve
