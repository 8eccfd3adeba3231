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
//
// The second form (QuantizeGroupsInt8, Int4LinearRangeInt8X: what AVX2
// runs, CpuKernels::int4_int8_x): x as int8 levels per group of columns,
// each group's own scale; per group the exact sum of (q - zero) * x, times
// the weight's and the activations' group scales, summed in float64.
#include <cmath>
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

float Element(const void* x, bool bf16, std::int64_t i) {
  return bf16 ? Bf16ToFloat(static_cast<const std::uint16_t*>(x)[i]) : static_cast<const float*>(x)[i];
}

// Rounded to nearest even and saturated, as vcvtps2dq then vpackssdw /
// vpacksswb do (NaN and values past the range: -128 or 127).
std::int8_t ToInt8(float v) {
  const float r = std::nearbyint(v);
  if (r >= 127.0f) return 127;
  if (r >= -128.0f) return static_cast<std::int8_t>(r);
  return -128;
}

float WeightScale(const float* scale, const std::uint16_t* scale16, std::int64_t i) {
  return scale16 != nullptr ? HalfToFloat(scale16[i]) : scale[i];
}

int Level(const std::uint8_t* row, std::int64_t k) {
  const std::uint8_t byte = row[k / 64 * 32 + k % 32];
  return k % 64 < 32 ? byte & 15 : byte >> 4;
}

void Store(void* out, bool out_bf16, std::int64_t i, float y) {
  if (out_bf16)
    static_cast<std::uint16_t*>(out)[i] = FloatToBf16(y);
  else
    static_cast<float*>(out)[i] = y;
}

}  // namespace

void QuantizeGroupsInt8(const void* x, bool bf16, std::int64_t M, std::int64_t K, std::int64_t Kp,
                        std::int64_t group_size, std::int8_t* xq, float* scales, std::int32_t* sums) {
  const std::int64_t G = K / group_size;
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t g = 0; g < G; ++g) {
      const std::int64_t k0 = g * group_size;
      float amax = 0.0f;
      for (std::int64_t k = k0; k < k0 + group_size; ++k)
        amax = std::fmax(amax, std::fabs(Element(x, bf16, m * K + k)));
      scales[m * G + g] = amax / 127.0f;
      const float inv = amax > 0 ? 127.0f / amax : 0.0f;
      std::int32_t sum = 0;
      for (std::int64_t k = k0; k < k0 + group_size; ++k) {
        xq[m * Kp + k] = ToInt8(Element(x, bf16, m * K + k) * inv);
        sum += xq[m * Kp + k];
      }
      sums[m * G + g] = sum;
    }
    for (std::int64_t k = K; k < Kp; ++k) xq[m * Kp + k] = 0;
  }
}

void Int4LinearRangeInt8X(const std::int8_t* xq, const float* xs, const std::int32_t* xsum, std::int64_t M,
                          std::int64_t Kp, const std::uint8_t* packed, const float* scale, const std::uint16_t* scale16,
                          const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias,
                          void* out, bool out_bf16, std::int64_t N, std::int64_t n_begin, std::int64_t n_end) {
  const std::int64_t G = K / group_size;
  for (std::int64_t n = n_begin; n < n_end; ++n)
    for (std::int64_t m = 0; m < M; ++m) {
      double total = 0;
      for (std::int64_t g = 0; g < G; ++g) {
        std::int64_t dot = 0;
        for (std::int64_t k = g * group_size; k < (g + 1) * group_size; ++k)
          dot += std::int64_t{Level(packed + n * (Kp / 2), k)} * xq[m * Kp + k];
        dot -= std::int64_t{zero[n * G + g]} * xsum[m * G + g];
        total += static_cast<double>(dot) * WeightScale(scale, scale16, n * G + g) * xs[m * G + g];
      }
      Store(out, out_bf16, m * N + n, static_cast<float>(total + (bias ? bias[n] : 0.0f)));
    }
}

void Int4LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp,
                     const std::uint8_t* packed, const float* scale, const std::uint16_t* scale16,
                     const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias, void* out,
                     bool out_bf16, std::int64_t N, std::int64_t n_begin, std::int64_t n_end) {
  const std::int64_t G = K / group_size;
  for (std::int64_t n = n_begin; n < n_end; ++n)
    for (std::int64_t m = 0; m < M; ++m) {
      double total = 0;
      for (std::int64_t g = 0; g < G; ++g) {
        std::int64_t dot = 0;
        for (std::int64_t k = g * group_size; k < (g + 1) * group_size; ++k)
          dot += std::int64_t{Level(packed + n * (Kp / 2), k) - zero[n * G + g]} * xq[m * Kp + k];
        total += static_cast<double>(dot) * WeightScale(scale, scale16, n * G + g);
      }
      Store(out, out_bf16, m * N + n, static_cast<float>(total * xs[m] + (bias ? bias[n] : 0.0f)));
    }
}

}  // namespace ropeserve::cpu::generic
