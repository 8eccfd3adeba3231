// The int8 and group-wise int4 matrix-vector kernels (int8_linear.h,
// int4_linear.h) on aarch64 Advanced SIMD: x rows as int16 levels (the
// quantization every variant shares), int16 x int16 products summed
// exactly in int32 lanes with vmlal_s16 (int8 weights: sums to float32
// every kChunk columns; int4: (q - zero) x per group, then one float32
// fma by the group's scale), the lanes reduced, times the row's scale,
// plus the bias. The AVX2 kernels' arithmetic with 4 lanes. Baseline
// armv8-a; called through the kernel table; no LibTorch header. Tested
// under qemu-user (scripts/test-arm64), not timed.
#include <arm_neon.h>

#include <cstdint>

#include "kernels/cpu/bf16_bits.h"

namespace ropeserve::cpu::neon {

namespace {

// Per int32 lane at most kChunk / 4 products of |x| <= 16383 and |w| <= 127: < 2^31.
constexpr std::int64_t kChunk = 2048;

inline void Store(void* out, bool bf16, std::int64_t i, float y) {
  if (bf16)
    static_cast<std::uint16_t*>(out)[i] = FloatToBf16(y);
  else
    static_cast<float*>(out)[i] = y;
}

// F16 bits to float (the scales PackInt4 keeps as float16 are exact there).
inline float Half(std::uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }

}  // namespace

void Int8LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp, const std::int8_t* w,
                     const float* ws, std::int64_t K, const float* bias, void* out, bool out_bf16, std::int64_t N,
                     std::int64_t n_begin, std::int64_t n_end) {
  for (std::int64_t n = n_begin; n < n_end; ++n) {
    const std::int8_t* wr = w + n * K;
    for (std::int64_t m = 0; m < M; ++m) {
      const std::int16_t* xr = xq + m * Kp;
      float32x4_t f = vdupq_n_f32(0.0f);
      for (std::int64_t k0 = 0; k0 < K; k0 += kChunk) {
        const std::int64_t kend = k0 + kChunk < K ? k0 + kChunk : K;
        int32x4_t a = vdupq_n_s32(0);
        std::int64_t k = k0;
        for (; k + 8 <= kend; k += 8) {
          const int16x8_t wv = vmovl_s8(vld1_s8(wr + k)), xv = vld1q_s16(xr + k);
          a = vmlal_s16(a, vget_low_s16(xv), vget_low_s16(wv));
          a = vmlal_high_s16(a, xv, wv);
        }
        std::int32_t tail = 0;
        for (; k < kend; ++k) tail += std::int32_t{xr[k]} * wr[k];
        a = vaddq_s32(a, vsetq_lane_s32(tail, vdupq_n_s32(0), 0));
        f = vaddq_f32(f, vcvtq_f32_s32(a));
      }
      Store(out, out_bf16, m * N + n, vaddvq_f32(f) * (xs[m] * ws[n]) + (bias ? bias[n] : 0.0f));
    }
  }
}

void Int4LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp,
                     const std::uint8_t* packed, const float* scale, const std::uint16_t* scale16,
                     const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias, void* out,
                     bool out_bf16, std::int64_t N, std::int64_t n_begin, std::int64_t n_end) {
  const std::int64_t G = K / group_size;
  for (std::int64_t n = n_begin; n < n_end; ++n) {
    const std::uint8_t* pr = packed + n * (Kp / 2);
    for (std::int64_t m = 0; m < M; ++m) {
      const std::int16_t* xr = xq + m * Kp;
      float32x4_t f = vdupq_n_f32(0.0f);
      for (std::int64_t g = 0; g < G; ++g) {
        const int16x8_t z = vdupq_n_s16(zero[n * G + g]);
        int32x4_t a = vdupq_n_s32(0);
        // The group's columns in runs of 16: a run of 16 bytes' low nibbles
        // (columns k..k+15 of a block's first half) or high nibbles (k..k+15
        // of its second half, from the bytes 32 before).
        for (std::int64_t k = g * group_size; k < (g + 1) * group_size; k += 16) {
          const uint8x16_t b = vld1q_u8(pr + k / 64 * 32 + k % 32);
          const uint8x16_t q = k % 64 < 32 ? vandq_u8(b, vdupq_n_u8(15)) : vshrq_n_u8(b, 4);
          const int16x8_t lo = vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(q))), z);
          const int16x8_t hi = vsubq_s16(vreinterpretq_s16_u16(vmovl_high_u8(q)), z);
          const int16x8_t x0 = vld1q_s16(xr + k), x1 = vld1q_s16(xr + k + 8);
          a = vmlal_s16(a, vget_low_s16(x0), vget_low_s16(lo));
          a = vmlal_high_s16(a, x0, lo);
          a = vmlal_s16(a, vget_low_s16(x1), vget_low_s16(hi));
          a = vmlal_high_s16(a, x1, hi);
        }
        const float s = scale16 != nullptr ? Half(scale16[n * G + g]) : scale[n * G + g];
        f = vfmaq_n_f32(f, vcvtq_f32_s32(a), s);
      }
      Store(out, out_bf16, m * N + n, vaddvq_f32(f) * xs[m] + (bias ? bias[n] : 0.0f));
    }
  }
}

}  // namespace ropeserve::cpu::neon
