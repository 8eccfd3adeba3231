// The scalar variants of the int8 matrix-vector kernel, the int16
// quantization of x rows (kernels/cpu/int8_linear.h) and the int8
// dequantization: the reference the vector variants are tested against,
// and what `--kernel-isa generic` runs. Plain C++, no LibTorch header.
//
// Arithmetic: x rows quantized exactly as the vector variants do (the
// quantized levels are equal bit for bit: one float32 multiply, rounded to
// nearest even); each dot product summed exactly in int64, then scaled
// once in float64 and rounded to the output dtype (the vector variants'
// float32 sums of int32 chunks are within their documented bound of it).
#include <cmath>
#include <cstdint>

#include "kernels/cpu/bf16_bits.h"

namespace ropeserve::cpu::generic {

namespace {

float Element(const void* x, bool bf16, std::int64_t i) {
  return bf16 ? Bf16ToFloat(static_cast<const std::uint16_t*>(x)[i]) : static_cast<const float*>(x)[i];
}

// x86's conversion with saturation to int16: nearest even, and what is
// not a number in range (NaN included) saturates as vcvtps2dq + vpackssdw do.
std::int16_t ToInt16(float v) {
  const float r = std::nearbyint(v);
  if (r >= 32767.0f) return 32767;
  if (r >= -32768.0f) return static_cast<std::int16_t>(r);
  return -32768;  // below the range, or NaN
}

}  // namespace

void QuantizeRowsInt16(const void* x, bool bf16, std::int64_t M, std::int64_t K, std::int64_t Kp, int levels,
                       std::int16_t* xq, float* scales) {
  for (std::int64_t m = 0; m < M; ++m) {
    float amax = 0.0f;
    for (std::int64_t k = 0; k < K; ++k) amax = std::fmax(amax, std::fabs(Element(x, bf16, m * K + k)));
    scales[m] = amax / static_cast<float>(levels);
    const float inv = amax > 0 ? static_cast<float>(levels) / amax : 0.0f;
    for (std::int64_t k = 0; k < Kp; ++k) xq[m * Kp + k] = k < K ? ToInt16(Element(x, bf16, m * K + k) * inv) : 0;
  }
}

void Int8LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp, const std::int8_t* w,
                     const float* ws, std::int64_t K, const float* bias, void* out, bool out_bf16, std::int64_t N,
                     std::int64_t n_begin, std::int64_t n_end) {
  for (std::int64_t n = n_begin; n < n_end; ++n)
    for (std::int64_t m = 0; m < M; ++m) {
      std::int64_t dot = 0;
      for (std::int64_t k = 0; k < K; ++k) dot += std::int64_t{xq[m * Kp + k]} * w[n * K + k];
      const float y = static_cast<float>(static_cast<double>(dot) * xs[m] * ws[n] + (bias ? bias[n] : 0.0f));
      if (out_bf16)
        static_cast<std::uint16_t*>(out)[m * N + n] = FloatToBf16(y);
      else
        static_cast<float*>(out)[m * N + n] = y;
    }
}

void DequantizeRows(const std::int8_t* q, const float* scale, std::int64_t K, void* out, bool out_bf16,
                    std::int64_t n_begin, std::int64_t n_end) {
  for (std::int64_t n = n_begin; n < n_end; ++n)
    for (std::int64_t k = 0; k < K; ++k) {
      const float v = static_cast<float>(q[n * K + k]) * scale[n];
      if (out_bf16)
        static_cast<std::uint16_t*>(out)[n * K + k] = FloatToBf16(v);
      else
        static_cast<float*>(out)[n * K + k] = v;
    }
}

}  // namespace ropeserve::cpu::generic
