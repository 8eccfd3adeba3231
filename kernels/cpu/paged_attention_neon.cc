// The per-row paged attention (paged_attention_core.h) on aarch64 Advanced
// SIMD: the blocked algorithm of paged_attention_blocked.h over 4-lane
// vectors (head sizes that are multiples of 4 up to 256), each key's 4
// lanes summed as (l0 + l1) + (l2 + l3); the softmax in scalar code as the
// generic variant's (std::exp). Baseline armv8-a (no flags); called
// through the kernel table; no LibTorch header. Tested under qemu-user
// (scripts/test-arm64), not timed: no ARM machine here.
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/bf16_bits.h"
#include "kernels/cpu/paged_attention_blocked.h"

namespace ropeserve::cpu::neon {

namespace {

struct Vec {
  using Reg = float32x4_t;
  static constexpr int kLanes = 4;
  static Reg Zero() { return vdupq_n_f32(0.0f); }
  static Reg Set1(float v) { return vdupq_n_f32(v); }
  static Reg Broadcast(const float* p) { return vld1q_dup_f32(p); }
  static Reg Load(const float* p) { return vld1q_f32(p); }
  static Reg Load(const std::uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
  static void Store(float* p, Reg v) { vst1q_f32(p, v); }
  static void Store(std::uint16_t* p, Reg v) {
    float f[4];
    vst1q_f32(f, v);
    for (int i = 0; i < 4; ++i) p[i] = FloatToBf16(f[i]);
  }
  static Reg Fma(Reg a, Reg b, Reg c) { return vfmaq_f32(c, a, b); }
  static Reg Mul(Reg a, Reg b) { return vmulq_f32(a, b); }
  static void Sum4(Reg a0, Reg a1, Reg a2, Reg a3, float* out) {
    vst1q_f32(out, vpaddq_f32(vpaddq_f32(a0, a1), vpaddq_f32(a2, a3)));
  }
  static float Softmax(float* s, std::int64_t n) {
    float m = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
    float sum = 0.0f;
    for (std::int64_t j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - m);
      sum += s[j];
    }
    return 1.0f / sum;
  }
};

}  // namespace

bool AttendItem(const AttentionItem& it) { return AttendBlocked<Vec>(it); }

}  // namespace ropeserve::cpu::neon
