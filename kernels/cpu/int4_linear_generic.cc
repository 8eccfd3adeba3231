// The scalar variant of the group-wise int4 matrix-vector kernel
// (kernels/cpu/int4_linear.h): the reference the vector variants are
// tested against, and what `--kernel-isa generic` runs. Plain C++, no
// LibTorch header.
//
// Arithmetic: x rows as int16 levels (QuantizeRowsInt16, the same levels
// as every variant's); per group the exact integer sum of (q - zero) * x,
// times the group's scale, summed over groups in float64, times the row's
// scale, plus the bias, rounded once to the output dtype (the vector
// variants' float32 lanes are within their documented bound of it).
#include <cstdint>
#include <cstring>

#include "kernels/cpu/bf16_bits.h"

namespace ropeserve::cpu::generic {

namespace {

// IEEE float16 bits to float (normal numbers, zeros and subnormals: the
// scales PackInt4 keeps as float16 are 0 or normal).
float HalfToFloat(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: mant * 2^-24
      float f = static_cast<float>(mant) * 0x1p-24f;
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

void Int4LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp,
                     const std::uint8_t* packed, const float* scale, const std::uint16_t* scale16,
                     const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias, void* out,
                     bool out_bf16, std::int64_t N, std::int64_t n_begin, std::int64_t n_end) {
  const std::int64_t G = K / group_size, row_bytes = Kp / 2;
  for (std::int64_t n = n_begin; n < n_end; ++n)
    for (std::int64_t m = 0; m < M; ++m) {
      double total = 0;
      for (std::int64_t g = 0; g < G; ++g) {
        std::int64_t dot = 0;
        for (std::int64_t k = g * group_size; k < (g + 1) * group_size; ++k) {
          const std::uint8_t byte = packed[n * row_bytes + k / 64 * 32 + k % 32];
          const int level = k % 64 < 32 ? byte & 15 : byte >> 4;
          dot += std::int64_t{level - zero[n * G + g]} * xq[m * Kp + k];
        }
        const float s = scale16 != nullptr ? HalfToFloat(scale16[n * G + g]) : scale[n * G + g];
        total += static_cast<double>(dot) * s;
      }
      const float y = static_cast<float>(total * xs[m] + (bias ? bias[n] : 0.0f));
      if (out_bf16)
        static_cast<std::uint16_t*>(out)[m * N + n] = FloatToBf16(y);
      else
        static_cast<float*>(out)[m * N + n] = y;
    }
}

}  // namespace ropeserve::cpu::generic
