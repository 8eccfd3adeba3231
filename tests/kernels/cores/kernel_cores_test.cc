// Every ISA variant of every kernel core (kernels/cpu/kernel_table.h) that
// this CPU can execute, against float64 maths and against the scalar
// generic variant: torch-free, so that it also runs cross-compiled for
// aarch64 under qemu (scripts/test-arm64). Where two variants do the same
// arithmetic in the same order (the generic, AVX2 and NEON panel GEMMs:
// one fma chain over k per output; every variant's int16 levels of x) they
// must agree bit for bit; elsewhere each is held to a bound derived from
// its arithmetic (tests/common/float_bounds.h), never a bare tolerance.
// The seed: ROPESERVE_TEST_SEED (printed on failure).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/bf16_bits.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_table.h"
#include "tests/common/float_bounds.h"

namespace ropeserve {
namespace {

using cpu::Bf16ToFloat;
using cpu::CpuKernels;
using cpu::FloatToBf16;
using cpu::Isa;
using testing::Gamma;
using testing::kBF16Roundoff;
using testing::kF32Roundoff;

constexpr std::int64_t kPanel = 64;
constexpr int kLevels = 16383;  // int8_linear.h's kInt8ActivationLevels

std::uint64_t Seed() {
  const char* s = std::getenv("ROPESERVE_TEST_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : 20261205;
}
#define SEED_TRACE SCOPED_TRACE("ROPESERVE_TEST_SEED=" + std::to_string(Seed()))

std::vector<Isa> Isas() { return cpu::RunnableIsas(); }  // generic first
std::string Name(Isa isa) { return cpu::IsaName(isa); }
// Variants whose panel GEMMs do the generic variant's arithmetic in its order.
bool PanelsLikeGeneric(Isa isa) {
  return isa == Isa::kAvx2 || isa == Isa::kNeon || (isa >= Isa::kAvx512 && !cpu::DetectedCpu().avx512_bf16);
}

template <typename T = float>
std::vector<T> Normal(std::mt19937_64& rng, std::int64_t n, double scale = 1.0) {
  std::normal_distribution<float> d(0.0f, static_cast<float>(scale));
  std::vector<T> out(static_cast<std::size_t>(n));
  for (auto& v : out) v = static_cast<T>(d(rng));
  return out;
}
std::vector<std::uint16_t> RandomBf16(std::mt19937_64& rng, std::int64_t n, double scale = 1.0) {
  std::vector<std::uint16_t> out;
  for (float v : Normal(rng, n, scale)) out.push_back(FloatToBf16(v));
  return out;
}
std::size_t At(std::int64_t i) { return static_cast<std::size_t>(i); }

// w [N, K] bf16 in packed_linear.h's panel order: [ceil(N/64), ceil(K/2), 64, 2], zero padded.
std::vector<std::uint16_t> Pack(const std::vector<std::uint16_t>& w, std::int64_t N, std::int64_t K) {
  const std::int64_t P = (N + kPanel - 1) / kPanel, KP = (K + 1) / 2;
  std::vector<std::uint16_t> out(At(P * KP * kPanel * 2), 0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t k = 0; k < K; ++k)
      out[At(((n / kPanel * KP + k / 2) * kPanel + n % kPanel) * 2 + k % 2)] = w[At(n * K + k)];
  return out;
}

// int4 levels q [N, K] (0-15) in kernels/int4_weight.h's layout: rows of
// ceil(K / 64) blocks of 32 bytes, byte j holding column j (low nibble) and
// j + 32 (high nibble).
std::vector<std::uint8_t> PackInt4(const std::vector<std::uint8_t>& q, std::int64_t N, std::int64_t K) {
  const std::int64_t row_bytes = (K + 63) / 64 * 32;
  std::vector<std::uint8_t> out(At(N * row_bytes), 0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t k = 0; k < K; ++k) {
      std::uint8_t& b = out[At(n * row_bytes + k / 64 * 32 + k % 32)];
      b = static_cast<std::uint8_t>(b | (k % 64 < 32 ? q[At(n * K + k)] : q[At(n * K + k)] << 4));
    }
  return out;
}

// y = x w^T + b in float64 and sum |x w| + |b| per output.
struct Expected {
  std::vector<double> y, magnitude;
};
template <typename W>
Expected Exact(const std::vector<std::uint16_t>& x, std::int64_t M, std::int64_t K, std::int64_t N, const W& w,
               const std::vector<float>& bias) {
  Expected e{std::vector<double>(At(M * N)), std::vector<double>(At(M * N))};
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double s = 0, a = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(Bf16ToFloat(x[At(m * K + k)])) * w(n, k);
        s += p;
        a += std::fabs(p);
      }
      if (!bias.empty()) {
        s += bias[At(n)];
        a += std::fabs(bias[At(n)]);
      }
      e.y[At(m * N + n)] = s;
      e.magnitude[At(m * N + n)] = a;
    }
  return e;
}

struct Shape {
  std::int64_t M, K, N;
};
const Shape kShapes[] = {{1, 1, 1},     {1, 2, 64},     {1, 3, 65},    {2, 31, 63},   {3, 64, 128},
                         {5, 257, 100}, {6, 96, 64},    {7, 513, 130}, {13, 896, 67}, {1, 896, 200},
                         {2, 4864, 70}, {33, 130, 129}, {64, 320, 64}};

// A bf16-output panel kernel of every ISA: `run(kernels, out, p_begin,
// p_end)`. Each output within `additions` float32 roundings of partial sums
// bounded by its magnitude, plus one bfloat16 rounding, of the float64
// value; the variants that share the generic arithmetic equal to it bit for
// bit. Called on panels [1, P) then [0, 1): ranges compose.
template <typename Run>
void CheckPanels(const Shape& s, const Expected& e, std::int64_t additions, const std::string& what, const Run& run) {
  const std::int64_t P = (s.N + kPanel - 1) / kPanel;
  std::vector<std::uint16_t> generic;
  for (Isa isa : Isas()) {
    const CpuKernels& k = cpu::KernelsFor(isa);
    std::vector<std::uint16_t> out(At(s.M * s.N), 0xffff);
    if (P > 1) run(k, out.data(), 1, P);
    run(k, out.data(), 0, 1);
    for (std::int64_t i = 0; i < s.M * s.N; ++i) {
      const double got = Bf16ToFloat(out[At(i)]);
      const double bound =
          static_cast<double>(additions) * kF32Roundoff * e.magnitude[At(i)] + kBF16Roundoff * std::fabs(e.y[At(i)]);
      ASSERT_LE(std::fabs(got - e.y[At(i)]), bound + 1e-30)
          << what << " " << Name(isa) << " M" << s.M << " K" << s.K << " N" << s.N << " at " << i;
    }
    if (isa == Isa::kGeneric) generic = out;
    if (PanelsLikeGeneric(isa)) {
      EXPECT_EQ(out, generic) << what << " " << Name(isa) << " M" << s.M << " K" << s.K << " N" << s.N;
    }
  }
}

TEST(KernelCores, EveryIsaThisCpuRunsHasAFullTable) {
  for (Isa isa : Isas()) {
    const CpuKernels& k = cpu::KernelsFor(isa);
    EXPECT_EQ(k.isa, isa);
    for (const void* f :
         {reinterpret_cast<const void*>(k.packed_linear_panels),
          reinterpret_cast<const void*>(k.packed_linear_f32_panels),
          reinterpret_cast<const void*>(k.int8_panel_linear_panels),
          reinterpret_cast<const void*>(k.int4_panel_linear_panels),
          reinterpret_cast<const void*>(k.quantize_rows_int16), reinterpret_cast<const void*>(k.int8_linear_range),
          reinterpret_cast<const void*>(k.dequantize_int8_rows), reinterpret_cast<const void*>(k.int4_linear_range),
          reinterpret_cast<const void*>(k.attend_item), reinterpret_cast<const void*>(k.rms_norm_rows_bf16),
          reinterpret_cast<const void*>(k.silu_and_mul_rows_bf16), reinterpret_cast<const void*>(k.summarize_row)})
      EXPECT_NE(f, nullptr) << Name(isa);
    EXPECT_EQ(k.amx_packed_linear_panels != nullptr, isa == Isa::kAmx) << Name(isa);
  }
  EXPECT_EQ(Isas().front(), Isa::kGeneric);
  EXPECT_EQ(Isas().back(), cpu::BestIsa());
}

TEST(KernelCores, PackedLinearPanels) {
  SEED_TRACE;
  std::mt19937_64 rng(Seed());
  for (const Shape& s : kShapes)
    for (bool with_bias : {false, true}) {
      const auto x = RandomBf16(rng, s.M * s.K), w = RandomBf16(rng, s.N * s.K);
      const auto packed = Pack(w, s.N, s.K);
      std::vector<float> bias;
      if (with_bias)
        for (auto b : RandomBf16(rng, s.N)) bias.push_back(Bf16ToFloat(b));
      const Expected e = Exact(
          x, s.M, s.K, s.N, [&](std::int64_t n, std::int64_t k) { return double{Bf16ToFloat(w[At(n * s.K + k)])}; },
          bias);
      // K products summed (each step one rounding) and the bias added.
      CheckPanels(s, e, s.K + 1, "bf16",
                  [&](const CpuKernels& k, std::uint16_t* out, std::int64_t b, std::int64_t end) {
                    k.packed_linear_panels(x.data(), s.M, s.K, packed.data(), bias.empty() ? nullptr : bias.data(), out,
                                           s.N, b, end);
                  });
      // The entry that takes x widened to float32: the same bits.
      std::vector<float> xf;
      for (auto v : x) xf.push_back(Bf16ToFloat(v));
      for (Isa isa : Isas()) {
        const CpuKernels& k = cpu::KernelsFor(isa);
        if (k.packed_linear_panels_float_x == nullptr || s.M <= 2) continue;
        const std::int64_t P = (s.N + kPanel - 1) / kPanel;
        std::vector<std::uint16_t> a(At(s.M * s.N)), b(At(s.M * s.N));
        const float* bp = bias.empty() ? nullptr : bias.data();
        k.packed_linear_panels(x.data(), s.M, s.K, packed.data(), bp, a.data(), s.N, 0, P);
        k.packed_linear_panels_float_x(xf.data(), s.M, s.K, packed.data(), bp, b.data(), s.N, 0, P);
        EXPECT_EQ(a, b) << Name(isa) << " M" << s.M << " K" << s.K << " N" << s.N;
      }
    }
}

// Float32 panels ([K][64] float32): one fma chain over k per output in
// every variant, so every ISA and every row count gives the same bits (a
// row's result does not depend on its batch); within K + 1 roundings of
// float64.
TEST(KernelCores, PackedLinearF32PanelsAreTheSameBitsEverywhere) {
  SEED_TRACE;
  std::mt19937_64 rng(Seed() + 10);
  for (const Shape& s : kShapes) {
    const auto x = Normal(rng, s.M * s.K), w = Normal(rng, s.N * s.K), bias = Normal(rng, s.N);
    const std::int64_t P = (s.N + kPanel - 1) / kPanel;
    std::vector<float> packed(At(P * s.K * kPanel), 0.0f);
    for (std::int64_t n = 0; n < s.N; ++n)
      for (std::int64_t k = 0; k < s.K; ++k)
        packed[At((n / kPanel * s.K + k) * kPanel + n % kPanel)] = w[At(n * s.K + k)];
    std::vector<float> generic;
    for (Isa isa : Isas()) {
      const CpuKernels& k = cpu::KernelsFor(isa);
      std::vector<float> out(At(s.M * s.N), std::nanf(""));
      if (P > 1) k.packed_linear_f32_panels(x.data(), s.M, s.K, packed.data(), bias.data(), out.data(), s.N, 1, P);
      k.packed_linear_f32_panels(x.data(), s.M, s.K, packed.data(), bias.data(), out.data(), s.N, 0, 1);
      for (std::int64_t m = 0; m < s.M; ++m)
        for (std::int64_t n = 0; n < s.N; ++n) {
          double y = bias[At(n)], mag = std::fabs(bias[At(n)]);
          for (std::int64_t k2 = 0; k2 < s.K; ++k2) {
            y += double{x[At(m * s.K + k2)]} * w[At(n * s.K + k2)];
            mag += std::fabs(double{x[At(m * s.K + k2)]} * w[At(n * s.K + k2)]);
          }
          ASSERT_LE(std::fabs(out[At(m * s.N + n)] - y), Gamma(s.K + 1, kF32Roundoff) * mag + 1e-30)
              << Name(isa) << " M" << s.M << " K" << s.K << " N" << s.N;
        }
      if (isa == Isa::kGeneric) generic = out;
      EXPECT_EQ(out, generic) << Name(isa) << " M" << s.M << " K" << s.K << " N" << s.N;
      // Row by row: the same bits as in the batch.
      for (std::int64_t m = 0; m < std::min<std::int64_t>(s.M, 3); ++m) {
        std::vector<float> one(At(s.N));
        k.packed_linear_f32_panels(x.data() + m * s.K, 1, s.K, packed.data(), bias.data(), one.data(), s.N, 0, P);
        EXPECT_TRUE(std::equal(one.begin(), one.end(), out.begin() + m * s.N)) << Name(isa) << " row " << m;
      }
    }
  }
}

TEST(KernelCores, Int8PanelLinearPanels) {
  SEED_TRACE;
  std::mt19937_64 rng(Seed() + 1);
  std::uniform_int_distribution<int> level(-127, 127);
  for (const Shape& s : kShapes) {
    const auto x = RandomBf16(rng, s.M * s.K);
    std::vector<std::int8_t> q(At(s.N * s.K));
    for (auto& v : q) v = static_cast<std::int8_t>(level(rng));
    std::vector<float> scale, bias;
    for (float v : Normal(rng, s.N, 0.01)) scale.push_back(std::fabs(v));
    for (auto b : RandomBf16(rng, s.N)) bias.push_back(Bf16ToFloat(b));
    const Expected e = Exact(
        x, s.M, s.K, s.N,
        [&](std::int64_t n, std::int64_t k) { return static_cast<double>(q[At(n * s.K + k)]) * scale[At(n)]; }, bias);
    // The sums of x q (K roundings of partial sums up to sum |x q|), then
    // fma(sum, scale, bias): one more rounding.
    CheckPanels(s, e, s.K + 2, "int8", [&](const CpuKernels& k, std::uint16_t* out, std::int64_t b, std::int64_t end) {
      k.int8_panel_linear_panels(x.data(), s.M, s.K, q.data(), scale.data(), bias.data(), out, s.N, b, end);
    });
  }
}

TEST(KernelCores, Int4PanelLinearPanels) {
  SEED_TRACE;
  std::mt19937_64 rng(Seed() + 2);
  std::uniform_int_distribution<int> level(0, 15), zero_point(0, 16);
  for (std::int64_t group : {32, 64, 128})
    for (const Shape& base : kShapes) {
      const Shape s{base.M, std::max<std::int64_t>(group, base.K / group * group), base.N};
      const std::int64_t G = s.K / group;
      const auto x = RandomBf16(rng, s.M * s.K);
      std::vector<std::uint8_t> q(At(s.N * s.K)), zero(At(s.N * G));
      for (auto& v : q) v = static_cast<std::uint8_t>(level(rng));
      for (auto& v : zero) v = static_cast<std::uint8_t>(zero_point(rng));
      std::vector<float> scale;
      for (float v : Normal(rng, s.N * G, 0.01)) scale.push_back(std::fabs(v));
      const auto packed = PackInt4(q, s.N, s.K);
      // Every panel path dequantizes a weight to bf16 first: those values
      // are the oracle's weights.
      auto weight = [&](std::int64_t n, std::int64_t k) {
        const std::int64_t g = n * G + k / group;
        return double{Bf16ToFloat(FloatToBf16(static_cast<float>(q[At(n * s.K + k)] - zero[At(g)]) * scale[At(g)]))};
      };
      const Expected e = Exact(x, s.M, s.K, s.N, weight, {});
      CheckPanels(s, e, s.K + 1, "int4 g" + std::to_string(group),
                  [&](const CpuKernels& k, std::uint16_t* out, std::int64_t b, std::int64_t end) {
                    k.int4_panel_linear_panels(x.data(), s.M, s.K, packed.data(), scale.data(), zero.data(), group,
                                               nullptr, out, s.N, b, end);
                  });
    }
}

// x rows as int16 levels: the same levels and scales in every variant
// (float32 and bf16 x; K not a multiple of 32; zeros up to Kp).
TEST(KernelCores, QuantizeRowsInt16IsTheSameEverywhere) {
  SEED_TRACE;
  std::mt19937_64 rng(Seed() + 3);
  for (std::int64_t K : {1, 7, 32, 33, 100, 896}) {
    const std::int64_t M = 3, Kp = (K + 31) / 32 * 32;
    auto xf = Normal(rng, M * K, 3.0);
    xf[0] = 0.0f;
    std::vector<float> zero_row(At(K), 0.0f);  // a row of zeros: scale 0, levels 0
    std::copy(zero_row.begin(), zero_row.end(), xf.begin() + K);
    std::vector<std::uint16_t> xb;
    for (float v : xf) xb.push_back(FloatToBf16(v));
    for (bool bf16 : {false, true}) {
      std::vector<std::int16_t> want;
      std::vector<float> want_scales;
      for (Isa isa : Isas()) {
        std::vector<std::int16_t> xq(At(M * Kp), 12345);
        std::vector<float> scales(At(M));
        const void* x = bf16 ? static_cast<const void*>(xb.data()) : static_cast<const void*>(xf.data());
        cpu::KernelsFor(isa).quantize_rows_int16(x, bf16, M, K, Kp, kLevels, xq.data(), scales.data());
        for (std::int64_t m = 0; m < M; ++m) {
          for (std::int64_t k = K; k < Kp; ++k) ASSERT_EQ(xq[At(m * Kp + k)], 0) << Name(isa);
          for (std::int64_t k = 0; k < K; ++k) {
            const float v = bf16 ? Bf16ToFloat(xb[At(m * K + k)]) : xf[At(m * K + k)];
            // Each level within half a step of x / scale, give or take the
            // roundings of scale, 1 / scale and x / scale (3 units of
            // float32 of a value up to kLevels steps).
            const double step = scales[At(m)];
            if (step > 0) {
              ASSERT_LE(std::fabs(xq[At(m * Kp + k)] * step - v), step * (0.5 + 4 * kLevels * kF32Roundoff))
                  << Name(isa);
            }
            ASSERT_LE(std::abs(xq[At(m * Kp + k)]), kLevels) << Name(isa);
          }
        }
        EXPECT_EQ(scales[1], 0.0f);
        if (isa == Isa::kGeneric) {
          want = xq;
          want_scales = scales;
        }
        EXPECT_EQ(xq, want) << Name(isa) << " K" << K << " bf16 " << bf16;
        EXPECT_EQ(scales, want_scales) << Name(isa);
      }
    }
  }
}

// The int8 matrix-vector kernel: exact int32 sums of int16 x and int8 w in
// every variant; what differs is how those sums become float32. Each
// variant within its float32 additions of sum |xq w| scaled, plus the
// output rounding, of the exact value on the same levels.
TEST(KernelCores, Int8LinearRange) {
  SEED_TRACE;
  std::mt19937_64 rng(Seed() + 4);
  std::uniform_int_distribution<int> level(-127, 127);
  for (const Shape& s : kShapes) {
    if (s.M > 48) continue;
    const std::int64_t Kp = (s.K + 31) / 32 * 32;
    const auto x = Normal(rng, s.M * s.K);
    std::vector<std::int8_t> w(At(s.N * s.K));
    for (auto& v : w) v = static_cast<std::int8_t>(level(rng));
    std::vector<float> ws, bias = Normal(rng, s.N);
    for (float v : Normal(rng, s.N, 0.01)) ws.push_back(std::fabs(v));
    std::vector<std::int16_t> xq(At(s.M * Kp));
    std::vector<float> xs(At(s.M));
    cpu::KernelsFor(Isa::kGeneric).quantize_rows_int16(x.data(), false, s.M, s.K, Kp, kLevels, xq.data(), xs.data());
    for (bool bf16_out : {false, true})
      for (Isa isa : Isas()) {
        std::vector<float> out32(At(s.M * s.N));
        std::vector<std::uint16_t> out16(At(s.M * s.N));
        void* out = bf16_out ? static_cast<void*>(out16.data()) : static_cast<void*>(out32.data());
        const CpuKernels& k = cpu::KernelsFor(isa);
        k.int8_linear_range(xq.data(), xs.data(), s.M, Kp, w.data(), ws.data(), s.K, bias.data(), out, bf16_out, s.N,
                            s.N / 2, s.N);
        k.int8_linear_range(xq.data(), xs.data(), s.M, Kp, w.data(), ws.data(), s.K, bias.data(), out, bf16_out, s.N, 0,
                            s.N / 2);
        for (std::int64_t m = 0; m < s.M; ++m)
          for (std::int64_t n = 0; n < s.N; ++n) {
            double exact = 0, mag = 0;
            for (std::int64_t k2 = 0; k2 < s.K; ++k2) {
              const double p = static_cast<double>(xq[At(m * Kp + k2)]) * w[At(n * s.K + k2)];
              exact += p;
              mag += std::fabs(p);
            }
            const double sc = double{xs[At(m)]} * ws[At(n)];
            const double y = exact * sc + bias[At(n)];
            // Lanes' chunk sums to float32 and added (at most K / 4096 + 16
            // additions and conversions), then reduced, scaled, biased.
            const double additions = static_cast<double>(s.K / 4096 + 16 + 4);
            const double bound = additions * kF32Roundoff * (mag * std::fabs(sc) + std::fabs(bias[At(n)])) +
                                 (bf16_out ? kBF16Roundoff : kF32Roundoff) * std::fabs(y);
            const double got = bf16_out ? Bf16ToFloat(out16[At(m * s.N + n)]) : out32[At(m * s.N + n)];
            ASSERT_LE(std::fabs(got - y), bound + 1e-30) << Name(isa) << " M" << s.M << " K" << s.K << " N" << s.N;
          }
      }
  }
}

TEST(KernelCores, DequantizeInt8RowsIsTheSameEverywhere) {
  SEED_TRACE;
  std::mt19937_64 rng(Seed() + 5);
  std::uniform_int_distribution<int> level(-127, 127);
  const std::int64_t N = 5, K = 77;
  std::vector<std::int8_t> q(At(N * K));
  for (auto& v : q) v = static_cast<std::int8_t>(level(rng));
  const auto scale = Normal(rng, N);
  std::vector<float> want32(At(N * K));
  std::vector<std::uint16_t> want16(At(N * K));
  for (std::int64_t i = 0; i < N * K; ++i) {
    want32[At(i)] = static_cast<float>(q[At(i)]) * scale[At(i / K)];
    want16[At(i)] = FloatToBf16(want32[At(i)]);
  }
  for (Isa isa : Isas()) {
    std::vector<float> out32(At(N * K));
    std::vector<std::uint16_t> out16(At(N * K));
    cpu::KernelsFor(isa).dequantize_int8_rows(q.data(), scale.data(), K, out32.data(), false, 0, N);
    cpu::KernelsFor(isa).dequantize_int8_rows(q.data(), scale.data(), K, out16.data(), true, 0, N);
    EXPECT_EQ(out32, want32) << Name(isa);
    EXPECT_EQ(out16, want16) << Name(isa);
  }
}

// Random int4 weights [N, K] in groups of `group`: levels 0-15, zero points
// 0-16, scales that are float16 values (so that the float16 copy holds
// them exactly), packed as kernels/int4_weight.h lays them out.
struct RandomInt4 {
  std::vector<std::uint8_t> q, zero, packed;
  std::vector<float> scale;
  std::vector<std::uint16_t> scale16;
};
RandomInt4 MakeInt4(std::mt19937_64& rng, std::int64_t N, std::int64_t K, std::int64_t group) {
  std::uniform_int_distribution<int> level(0, 15), zero_point(0, 16), mantissa(0, 1023), exponent(5, 12);
  RandomInt4 w;
  w.q.resize(At(N * K));
  w.zero.resize(At(N * K / group));
  for (auto& v : w.q) v = static_cast<std::uint8_t>(level(rng));
  for (auto& v : w.zero) v = static_cast<std::uint8_t>(zero_point(rng));
  for (std::int64_t i = 0; i < N * K / group; ++i) {
    const int e = exponent(rng), m = mantissa(rng);
    w.scale16.push_back(static_cast<std::uint16_t>((e << 10) | m));
    w.scale.push_back(std::ldexp(1.0f + m / 1024.0f, e - 15));
  }
  w.packed = PackInt4(w.q, N, K);
  return w;
}

// Output (m, n) of int4 weights w ([N, K], groups of `group`) times the
// levels xq (rows Kp apart) in float64: sum over groups of
// group_scale(g) * sum (q - zero) x, and the same over |products| (the
// magnitude the float32 bounds scale with).
template <typename X, typename GroupScale>
std::pair<double, double> Int4Exact(const RandomInt4& w, const X* xq, std::int64_t m, std::int64_t n, std::int64_t K,
                                    std::int64_t Kp, std::int64_t group, GroupScale group_scale) {
  const std::int64_t G = K / group;
  double exact = 0, mag = 0;
  for (std::int64_t g = 0; g < G; ++g) {
    double dot = 0, dmag = 0;
    for (std::int64_t c = g * group; c < (g + 1) * group; ++c) {
      const double p = double(w.q[At(n * K + c)] - w.zero[At(n * G + g)]) * xq[At(m * Kp + c)];
      dot += p;
      dmag += std::fabs(p);
    }
    exact += dot * group_scale(g);
    mag += dmag * group_scale(g);
  }
  return {exact, mag};
}

// The int4 matrix-vector kernel: exact int32 sums of (q - zero) x per group
// and lane, then float32 fmas with the group scales: per lane at most G
// such steps, then the lane reduction and the row scale.
TEST(KernelCores, Int4LinearRange) {
  SEED_TRACE;
  std::mt19937_64 rng(Seed() + 6);
  for (std::int64_t group : {32, 64, 128})
    for (const Shape& base : kShapes) {
      if (base.M > 48) continue;
      const Shape s{base.M, std::max<std::int64_t>(group, base.K / group * group), base.N};
      const std::int64_t G = s.K / group, Kp = (s.K + 63) / 64 * 64;
      const auto x = Normal(rng, s.M * s.K);
      const RandomInt4 w = MakeInt4(rng, s.N, s.K, group);
      const auto& [q, zero, packed, scale, scale16] = w;
      std::vector<std::int16_t> xq(At(s.M * Kp));
      std::vector<float> xs(At(s.M));
      cpu::KernelsFor(Isa::kGeneric).quantize_rows_int16(x.data(), false, s.M, s.K, Kp, kLevels, xq.data(), xs.data());
      const auto bias = Normal(rng, s.N);
      for (bool half : {false, true})
        for (Isa isa : Isas()) {
          std::vector<float> out(At(s.M * s.N));
          const CpuKernels& k = cpu::KernelsFor(isa);
          k.int4_linear_range(xq.data(), xs.data(), s.M, Kp, packed.data(), scale.data(),
                              half ? scale16.data() : nullptr, zero.data(), s.K, group, bias.data(), out.data(), false,
                              s.N, 0, s.N);
          for (std::int64_t m = 0; m < s.M; ++m)
            for (std::int64_t n = 0; n < s.N; ++n) {
              const auto [exact, mag] = Int4Exact(w, xq.data(), m, n, s.K, Kp, group,
                                                  [&](std::int64_t g) { return double(scale[At(n * G + g)]); });
              const double y = exact * xs[At(m)] + bias[At(n)];
              const double additions = static_cast<double>(G + 16 + 4);
              const double bound =
                  additions * kF32Roundoff * (mag * xs[At(m)] + std::fabs(bias[At(n)])) + kF32Roundoff * std::fabs(y);
              ASSERT_LE(std::fabs(out[At(m * s.N + n)] - y), bound + 1e-30)
                  << Name(isa) << " g" << group << " M" << s.M << " K" << s.K << " N" << s.N << " f16 " << half;
            }
        }
    }
}

// The int4 kernel's int8-x form (kernel_table.h: int4_int8_x), in every
// table that has it (generic: the scalar reference; AVX2): x as int8
// levels per group, the same levels, scales and sums everywhere (float32
// and bf16 x, a zero group, zeros up to Kp); then exact int32 sums of
// q x - zero sum(x) per group, float32 fmas with the product of the two
// group scales: per lane at most G such steps, then the lane reduction.
TEST(KernelCores, Int4LinearRangeInt8X) {
  SEED_TRACE;
  std::mt19937_64 rng(Seed() + 11);
  for (std::int64_t group : {32, 64, 128})
    for (const Shape& base : kShapes) {
      if (base.M > 48) continue;
      const Shape s{base.M, std::max<std::int64_t>(group, base.K / group * group), base.N};
      const std::int64_t G = s.K / group, Kp = (s.K + 63) / 64 * 64;
      auto x = Normal(rng, s.M * s.K, 3.0);
      for (std::int64_t k = 0; k < group; ++k) x[At(k)] = 0.0f;  // row 0's first group: scale 0, levels 0
      std::vector<std::uint16_t> xb;
      for (float v : x) xb.push_back(FloatToBf16(v));
      const RandomInt4 w = MakeInt4(rng, s.N, s.K, group);
      const auto& [q, zero, packed, scale, scale16] = w;
      const auto bias = Normal(rng, s.N);
      for (bool bf16 : {false, true}) {
        std::vector<std::int8_t> want_q;
        std::vector<float> want_s;
        std::vector<std::int32_t> want_sums;
        for (Isa isa : Isas()) {
          const CpuKernels& k = cpu::KernelsFor(isa);
          if (k.int4_linear_range_int8_x == nullptr) continue;
          std::vector<std::int8_t> xq(At(s.M * Kp), 99);
          std::vector<float> xs(At(s.M * G));
          std::vector<std::int32_t> sums(At(s.M * G));
          const void* xp = bf16 ? static_cast<const void*>(xb.data()) : static_cast<const void*>(x.data());
          k.quantize_groups_int8(xp, bf16, s.M, s.K, Kp, group, xq.data(), xs.data(), sums.data());
          for (std::int64_t m = 0; m < s.M; ++m) {
            for (std::int64_t c = s.K; c < Kp; ++c) ASSERT_EQ(xq[At(m * Kp + c)], 0) << Name(isa);
            for (std::int64_t g = 0; g < G; ++g) {
              std::int32_t sum = 0;
              for (std::int64_t c = g * group; c < (g + 1) * group; ++c) {
                const float v = bf16 ? Bf16ToFloat(xb[At(m * s.K + c)]) : x[At(m * s.K + c)];
                const double step = xs[At(m * G + g)];
                // Half a step, give or take the roundings of the scale and of x / scale.
                ASSERT_LE(std::fabs(xq[At(m * Kp + c)] * step - v), step * (0.5 + 4 * 127 * kF32Roundoff)) << Name(isa);
                sum += xq[At(m * Kp + c)];
              }
              ASSERT_EQ(sums[At(m * G + g)], sum) << Name(isa);
            }
          }
          EXPECT_EQ(xs[0], 0.0f);
          if (isa == Isa::kGeneric) {
            want_q = xq;
            want_s = xs;
            want_sums = sums;
          }
          EXPECT_EQ(xq, want_q) << Name(isa) << " g" << group << " K" << s.K << " bf16 " << bf16;
          EXPECT_EQ(xs, want_s) << Name(isa);
          EXPECT_EQ(sums, want_sums) << Name(isa);
          std::vector<float> out(At(s.M * s.N));
          // The float16 copy of the scales with bf16 x, the float32 ones with float32 x.
          k.int4_linear_range_int8_x(xq.data(), xs.data(), sums.data(), s.M, Kp, packed.data(), scale.data(),
                                     bf16 ? scale16.data() : nullptr, zero.data(), s.K, group, bias.data(), out.data(),
                                     false, s.N, 0, s.N);
          for (std::int64_t m = 0; m < s.M; ++m)
            for (std::int64_t n = 0; n < s.N; ++n) {
              const auto [exact, mag] = Int4Exact(w, xq.data(), m, n, s.K, Kp, group, [&](std::int64_t g) {
                return double(scale[At(n * G + g)]) * xs[At(m * G + g)];
              });
              const double y = exact + bias[At(n)];
              // Per group the scales' product and the fma (2 roundings), G
              // steps a lane, 8 lanes reduced, the bias, the output.
              const double additions = static_cast<double>(2 * G + 8 + 4);
              const double bound =
                  additions * kF32Roundoff * (mag + std::fabs(bias[At(n)])) + kF32Roundoff * std::fabs(y);
              ASSERT_LE(std::fabs(out[At(m * s.N + n)] - y), bound + 1e-30)
                  << Name(isa) << " g" << group << " M" << s.M << " K" << s.K << " N" << s.N;
            }
        }
      }
    }
}

// Paged attention work items: shuffled blocks, GQA groups, head sizes the
// vector variants take and one they do not, float32 and bf16, decode rows
// and short chunks; each variant against float64 attention on the same
// values, within the bound of paged_attention_core.h's arithmetic.
TEST(KernelCores, AttendItem) {
  SEED_TRACE;
  std::mt19937_64 rng(Seed() + 7);
  struct Case {
    std::int64_t block_size, group, head_dim, rows, context;
  };
  for (const Case& c :
       {Case{16, 1, 64, 1, 1}, Case{16, 7, 64, 1, 300}, Case{4, 2, 128, 3, 37}, Case{16, 3, 16, 2, 17},
        Case{8, 5, 96, 1, 70}, Case{16, 1, 24, 2, 9}, Case{16, 17, 32, 1, 129}, Case{32, 4, 256, 4, 600},
        // Rows in several blocks of (row, head) pairs, a value-channel tail
        // (40 = 16 + 16 + 8), and a group larger than a block.
        Case{16, 7, 64, 6, 300}, Case{16, 2, 40, 16, 50}, Case{16, 40, 16, 3, 20}})
    for (bool bf16 : {false, true}) {
      const std::int64_t Hkv = 2, D = c.head_dim, G = c.group, L = c.context;
      const std::int64_t blocks = (L + c.block_size - 1) / c.block_size + 2;
      std::vector<std::int32_t> table;
      for (std::int64_t b = 0; b < blocks; ++b) table.push_back(static_cast<std::int32_t>(b));
      std::shuffle(table.begin(), table.end(), rng);
      const std::int64_t cache = blocks * c.block_size * Hkv * D, qsize = c.rows * G * Hkv * D;
      // Values as stored (bf16 rounds them), and their float values.
      auto make = [&](std::int64_t n, std::vector<float>& f, std::vector<std::uint16_t>& b) {
        f = Normal(rng, n);
        b.clear();
        for (float& v : f) {
          b.push_back(FloatToBf16(v));
          if (bf16) v = Bf16ToFloat(b.back());
        }
      };
      std::vector<float> qf, kf, vf;
      std::vector<std::uint16_t> qb, kb, vb;
      make(qsize, qf, qb);
      make(cache, kf, kb);
      make(cache, vf, vb);
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      const std::int64_t kvh = 1;  // the second kv head
      const std::int64_t token_stride = Hkv * D, block_stride = c.block_size * token_stride;
      auto slot = [&](std::int64_t j) {
        return table[At(j / c.block_size)] * block_stride + (j % c.block_size) * token_stride + kvh * D;
      };
      for (Isa isa : Isas()) {
        std::vector<float> scratch(At(cpu::AttentionScratchFloats(G, D, L)));
        std::vector<float> of(At(qsize), 0.0f);
        std::vector<std::uint16_t> ob(At(qsize), 0);
        const std::int64_t first = kvh * G * D;
        const cpu::AttentionItem it{bf16 ? static_cast<const void*>(qb.data() + first) : qf.data() + first,
                                    bf16 ? static_cast<void*>(ob.data() + first) : of.data() + first,
                                    G * Hkv * D,
                                    c.rows,
                                    G,
                                    D,
                                    L,
                                    bf16 ? static_cast<const void*>(kb.data() + kvh * D) : kf.data() + kvh * D,
                                    bf16 ? static_cast<const void*>(vb.data() + kvh * D) : vf.data() + kvh * D,
                                    table.data(),
                                    c.block_size,
                                    block_stride,
                                    token_stride,
                                    scale,
                                    bf16,
                                    scratch.data()};
        const CpuKernels& k = cpu::KernelsFor(isa);
        if (!k.attend_item(it)) {
          // Only the generic variant takes every shape; AVX2 and better take
          // head sizes that are multiples of 8 (paged_attention_core.h).
          EXPECT_TRUE(isa != Isa::kGeneric && D % 8 != 0) << Name(isa) << " refused head size " << D;
          continue;
        }
        // Each row alone (a decode row over its own keys) gives the bits
        // it got among the item's rows: a position's result does not
        // depend on the chunk it is computed in.
        for (std::int64_t r = 0; r < c.rows; ++r) {
          std::vector<float> of1(At(qsize), 0.0f);
          std::vector<std::uint16_t> ob1(At(qsize), 0);
          const std::int64_t at = r * G * Hkv * D + first;
          cpu::AttentionItem one = it;
          one.q = bf16 ? static_cast<const void*>(qb.data() + at) : qf.data() + at;
          one.out = bf16 ? static_cast<void*>(ob1.data() + at) : of1.data() + at;
          one.rows = 1;
          one.context_len = L - c.rows + r + 1;
          ASSERT_TRUE(k.attend_item(one));
          for (std::int64_t i = at; i < at + G * D; ++i)
            ASSERT_EQ(bf16 ? Bf16ToFloat(ob1[At(i)]) : of1[At(i)], bf16 ? Bf16ToFloat(ob[At(i)]) : of[At(i)])
                << Name(isa) << " row " << r << " of " << c.rows << " G" << G << " D" << D;
        }
        for (std::int64_t r = 0; r < c.rows; ++r) {
          const std::int64_t n_keys = L - c.rows + r + 1;
          for (std::int64_t h = 0; h < G; ++h) {
            const std::int64_t qa = r * G * Hkv * D + first + h * D;
            std::vector<double> s(At(n_keys));
            double m = -std::numeric_limits<double>::infinity(), score_error = 0;
            for (std::int64_t j = 0; j < n_keys; ++j) {
              double dot = 0, mag = 0;
              for (std::int64_t d = 0; d < D; ++d) {
                const double p = double{qf[At(qa + d)]} * scale * kf[At(slot(j) + d)];
                dot += p;
                mag += std::fabs(p);
              }
              s[At(j)] = dot;
              m = std::max(m, dot);
              // q * scale rounded, then D float32 additions.
              score_error = std::max(score_error, (Gamma(D, kF32Roundoff) + kF32Roundoff) * mag);
            }
            double sum = 0;
            for (double& v : s) {
              v = std::exp(v - m);
              sum += v;
            }
            for (std::int64_t d = 0; d < D; ++d) {
              double want = 0, mag = 0;
              for (std::int64_t j = 0; j < n_keys; ++j) {
                want += s[At(j)] / sum * vf[At(slot(j) + d)];
                mag += s[At(j)] / sum * std::fabs(vf[At(slot(j) + d)]);
              }
              // Each probability's relative error: its score's and the max's
              // (twice score_error), the exp (2 ulp) and the subtraction; the
              // normalization's sum (L additions) and 1 / sum; the weighted
              // sum of values (L additions) and the product with 1 / sum.
              const double relative =
                  2 * (2 * score_error + 4 * kF32Roundoff) + 2 * Gamma(L, kF32Roundoff) + 4 * kF32Roundoff;
              const double got = bf16 ? Bf16ToFloat(ob[At(qa + d)]) : of[At(qa + d)];
              const double bound = relative * mag + (bf16 ? kBF16Roundoff : kF32Roundoff) * std::fabs(want);
              ASSERT_LE(std::fabs(got - want), bound + 1e-30)
                  << Name(isa) << " D" << D << " G" << G << " L" << L << " rows " << c.rows << " bf16 " << bf16;
            }
          }
        }
      }
    }
}

// bf16 RMSNorm (and residual add) and SiLU-and-multiply, rounding where
// the reference rounds: the residual sums equal everywhere; each output
// within its bound of the float64 value.
TEST(KernelCores, RmsNormAndSiluRows) {
  SEED_TRACE;
  std::mt19937_64 rng(Seed() + 8);
  for (std::int64_t n : {1, 7, 8, 9, 64, 100, 896}) {
    const std::int64_t rows = 3;
    const auto x = RandomBf16(rng, rows * n, 2.0), h = RandomBf16(rng, rows * n, 2.0), w = RandomBf16(rng, n);
    const double eps = 1e-6;
    std::vector<std::uint16_t> want_residual;
    for (Isa isa : Isas()) {
      const CpuKernels& k = cpu::KernelsFor(isa);
      for (bool add : {false, true}) {
        std::vector<std::uint16_t> residual = h, out(At(rows * n));
        k.rms_norm_rows_bf16(x.data(), add ? residual.data() : nullptr, w.data(), out.data(), 0, rows, n, eps);
        if (add) {
          if (isa == Isa::kGeneric) want_residual = residual;
          EXPECT_EQ(residual, want_residual) << Name(isa);
        }
        const auto& src = add ? residual : x;
        for (std::int64_t r = 0; r < rows; ++r) {
          double squares = 0;
          for (std::int64_t i = 0; i < n; ++i) squares += std::pow(double{Bf16ToFloat(src[At(r * n + i)])}, 2);
          const double inv = 1 / std::sqrt(squares / static_cast<double>(n) + eps);
          // inv: the float32 sum of squares (n additions), the mean, eps,
          // sqrt and division; then normed rounded to bf16, times w, rounded.
          const double inv_error = Gamma(n + 5, kF32Roundoff);
          for (std::int64_t i = 0; i < n; ++i) {
            const double normed = Bf16ToFloat(src[At(r * n + i)]) * inv, wi = Bf16ToFloat(w[At(i)]);
            const double want = wi * normed;
            const double bound = std::fabs(wi * normed) * (inv_error + kBF16Roundoff) * (1 + kBF16Roundoff) +
                                 kBF16Roundoff * std::fabs(want) * 1.01;
            ASSERT_LE(std::fabs(Bf16ToFloat(out[At(r * n + i)]) - want), bound + 1e-30) << Name(isa) << " n" << n;
          }
        }
      }
      // silu(g) * u: silu in float32 (exp within 2 ulp, then 1 + e, g / (.):
      // 5 roundings) rounded to bf16, times u, rounded.
      const auto gate_up = RandomBf16(rng, rows * 2 * n, 3.0);
      std::vector<std::uint16_t> out(At(rows * n));
      k.silu_and_mul_rows_bf16(gate_up.data(), out.data(), 0, rows, n);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t i = 0; i < n; ++i) {
          const double g = Bf16ToFloat(gate_up[At(r * 2 * n + i)]), u = Bf16ToFloat(gate_up[At(r * 2 * n + n + i)]);
          const double silu = g / (1 + std::exp(-g)), want = silu * u;
          const double bound = std::fabs(silu * u) * (5 * kF32Roundoff + kBF16Roundoff) * (1 + kBF16Roundoff) +
                               kBF16Roundoff * std::fabs(want) * 1.01;
          ASSERT_LE(std::fabs(Bf16ToFloat(out[At(r * n + i)]) - want), bound + 1e-30) << Name(isa) << " silu n" << n;
        }
    }
  }
}

// The logits summary: max and lowest argmax exact (ties inside and across
// lanes, NaN, infinities) and the same in every variant; logsumexp within
// logits_summary.h's bound 3 * 2^-23 + |lse| * 2^-24 of float64.
TEST(KernelCores, SummarizeRow) {
  SEED_TRACE;
  std::mt19937_64 rng(Seed() + 9);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows;
  for (std::int64_t n : {1, 5, 8, 17, 1000, 151936}) rows.push_back(Normal(rng, n, 4.0));
  rows.push_back(std::vector<float>(37, 2.5f));  // every entry the max: id 0
  auto ties = Normal(rng, 100);
  ties[13] = ties[77] = ties[45] = 50.0f;  // lowest is 13 (lanes 5, 13, 5 of 8)
  rows.push_back(ties);
  auto with_nan = Normal(rng, 40);
  with_nan[21] = std::nanf("");
  with_nan[30] = std::nanf("");
  rows.push_back(with_nan);
  rows.push_back(std::vector<float>(20, -inf));
  auto with_inf = Normal(rng, 30);
  with_inf[9] = inf;
  rows.push_back(with_inf);
  auto minus_inf = Normal(rng, 30);
  for (int i = 0; i < 30; i += 2) minus_inf[At(i)] = -inf;
  rows.push_back(minus_inf);
  for (const auto& x : rows)
    for (Isa isa : Isas()) {
      float lse = 0, mx = 0;
      std::int64_t arg = -1;
      cpu::KernelsFor(isa).summarize_row(x.data(), static_cast<std::int64_t>(x.size()), &lse, &mx, &arg);
      std::int64_t want_arg = 0;
      bool nan = false;
      for (std::size_t i = 0; i < x.size() && !nan; ++i) {
        if (std::isnan(x[i])) {
          nan = true;
          want_arg = static_cast<std::int64_t>(i);
        } else if (x[i] > x[At(want_arg)]) {
          want_arg = static_cast<std::int64_t>(i);
        }
      }
      ASSERT_EQ(arg, want_arg) << Name(isa) << " n" << x.size();
      if (nan) {
        EXPECT_TRUE(std::isnan(mx) && std::isnan(lse)) << Name(isa);
        continue;
      }
      EXPECT_EQ(mx, x[At(want_arg)]) << Name(isa);
      if (std::isinf(mx)) {
        EXPECT_EQ(lse, mx) << Name(isa);
        continue;
      }
      double sum = 0;
      for (float v : x) sum += std::exp(double{v} - mx);
      const double want = mx + std::log(sum);
      EXPECT_LE(std::fabs(lse - want), 3 * 0x1p-23 + std::fabs(want) * 0x1p-24) << Name(isa) << " n" << x.size();
    }
}

}  // namespace
}  // namespace ropeserve
