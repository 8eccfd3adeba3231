// float32 <-> bfloat16 bit conversions for the kernel files of every ISA, which
// include no LibTorch header. `static`: each file keeps its own copy, so
// the linker cannot pick one compiled for another file's instruction set.
#pragma once

#include <cstdint>

namespace ropeserve::cpu {

// Round to nearest even, as c10::BFloat16 does (NaN stays NaN).
[[maybe_unused]] static inline std::uint16_t FloatToBf16(float f) {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

[[maybe_unused]] static inline float Bf16ToFloat(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

}  // namespace ropeserve::cpu
