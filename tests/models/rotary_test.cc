// The shared RoPE (server/models/rotary.h) against its oracles: the
// rotate-half table and rotation against kernels/reference (what the
// decoders' reference path runs), the interleaved layout against the
// formula evaluated in double; and the KV-cache write against
// reference::WriteKvCache.
#include "server/models/rotary.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/paged_attention.h"
#include "kernels/reference/reference_ops.h"
#include "tests/common/float_bounds.h"

namespace ropeserve {
namespace {

// Llama-style frequencies for rotary_dim r: 1 / theta^(2i/r), float32.
at::Tensor InvFreq(std::int64_t r, double theta) {
  return 1.0 / at::pow(theta, at::arange(0, r, 2, at::kLong).to(at::kFloat) / static_cast<double>(r));
}

TEST(RotaryTable, RotateHalfMatchesTheReferenceTable) {
  // Positions far into a long context, where the angles are large.
  const at::Tensor positions = at::cat({at::arange(0, 64, at::kLong), at::arange(32000, 32064, at::kLong)});
  for (const std::int64_t r : {64, 128, 32}) {
    for (const double factor : {1.0, 1.25}) {
      const at::Tensor inv = InvFreq(r, 10000.0);
      auto [cos, sin] = RotaryTable(inv, positions, factor, RotaryLayout::kRotateHalf, at::kFloat, at::kFloat);
      auto [rcos, rsin] = reference::RopeCosSin(inv, positions, factor, at::kFloat);
      ASSERT_EQ(cos.sizes(), rcos.sizes());
      // Same float32 angles; cos and sin may come from the vectorised or the
      // scalar routine depending on an element's place (each within 1 ulp
      // of the exact value): 2 ulps of 1, times the factor.
      const double bound = 2 * 2 * testing::kF32Roundoff * factor;
      EXPECT_LE((cos - rcos).abs().max().item<double>(), bound) << r << " " << factor;
      EXPECT_LE((sin - rsin).abs().max().item<double>(), bound) << r << " " << factor;
      // The two halves of a row are the same frequencies.
      EXPECT_TRUE(at::equal(cos.narrow(1, 0, r / 2), cos.narrow(1, r / 2, r / 2)));
      // bfloat16 is the float32 table rounded once.
      auto [bcos, bsin] = RotaryTable(inv, positions, factor, RotaryLayout::kRotateHalf, at::kFloat, at::kBFloat16);
      EXPECT_TRUE(at::equal(bcos, cos.to(at::kBFloat16)));
      EXPECT_TRUE(at::equal(bsin, sin.to(at::kBFloat16)));
    }
  }
}

TEST(RotaryTable, InterleavedMatchesTheFormulaInDouble) {
  const std::int64_t d = 64, len = 512;
  const at::Tensor inv = at::pow(10000.0, -2.0 * at::arange(0, d / 2, at::kDouble) / static_cast<double>(d));
  auto [cos, sin] =
      RotaryTable(inv, at::arange(len, at::kLong), 1.0, RotaryLayout::kInterleaved, at::kDouble, at::kFloat);
  ASSERT_EQ(cos.sizes(), (std::vector<std::int64_t>{len, d}));
  const auto* inv_p = inv.data_ptr<double>();
  const auto* c = cos.data_ptr<float>();
  const auto* s = sin.data_ptr<float>();
  for (std::int64_t p = 0; p < len; ++p) {
    for (std::int64_t j = 0; j < d; ++j) {
      const double angle = static_cast<double>(p) * inv_p[j / 2];
      // The angle is rounded to float32 (relative 2^-24) before cosf/sinf,
      // each within 1 ulp of 1.
      const double bound = std::abs(angle) * testing::kF32Roundoff + 2 * 2 * testing::kF32Roundoff;
      ASSERT_LE(std::abs(c[p * d + j] - std::cos(angle)), bound) << p << " " << j;
      ASSERT_LE(std::abs(s[p * d + j] - std::sin(angle)), bound) << p << " " << j;
    }
  }
}

TEST(ApplyRotary, RotateHalfEqualsTheReferenceIncludingPartialRotary) {
  at::manual_seed(7);
  const std::int64_t T = 9, H = 3, D = 64;
  for (const std::int64_t r : {64, 32}) {
    const at::Tensor x = at::randn({T, H, D});
    auto [cos, sin] = RotaryTable(InvFreq(r, 10000.0), at::arange(T, at::kLong), 1.0, RotaryLayout::kRotateHalf,
                                  at::kFloat, at::kFloat);
    const at::Tensor got = ApplyRotary(x, cos.unsqueeze(1), sin.unsqueeze(1), RotaryLayout::kRotateHalf);
    // The same elementwise operations in the same order: bitwise equal.
    EXPECT_TRUE(at::equal(got, reference::ApplyRope(x, cos, sin))) << r;
    if (r < D) {
      EXPECT_TRUE(at::equal(got.narrow(-1, r, D - r), x.narrow(-1, r, D - r)));
    }
  }
}

TEST(ApplyRotary, InterleavedRotatesAdjacentPairs) {
  at::manual_seed(8);
  const std::int64_t T = 5, H = 2, D = 16;
  const at::Tensor x = at::randn({H, T, D});
  const at::Tensor inv = at::pow(10000.0, -2.0 * at::arange(0, D / 2, at::kDouble) / static_cast<double>(D));
  auto [cos, sin] =
      RotaryTable(inv, at::arange(T, at::kLong), 1.0, RotaryLayout::kInterleaved, at::kDouble, at::kFloat);
  const at::Tensor got = ApplyRotary(x, cos, sin, RotaryLayout::kInterleaved).contiguous();
  const at::Tensor xc = x.contiguous();
  for (std::int64_t h = 0; h < H; ++h) {
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t i = 0; i < D; i += 2) {
        const double x0 = xc[h][t][i].item<float>(), x1 = xc[h][t][i + 1].item<float>();
        const double c0 = cos[t][i].item<float>(), s0 = sin[t][i].item<float>();
        // y0 = x0 c - x1 s, y1 = x1 c + x0 s: two products and a sum in
        // float32, within 2 gamma_2 of their magnitudes.
        const double g = 2 * testing::Gamma(2, testing::kF32Roundoff);
        EXPECT_NEAR(got[h][t][i].item<float>(), x0 * c0 - x1 * s0, g * (std::abs(x0 * c0) + std::abs(x1 * s0)));
        EXPECT_NEAR(got[h][t][i + 1].item<float>(), x1 * c0 + x0 * s0, g * (std::abs(x1 * c0) + std::abs(x0 * s0)));
      }
    }
  }
}

TEST(WriteKvCache, EqualsTheReferenceAndRefusesSlotsOutsideTheCache) {
  at::manual_seed(9);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const std::int64_t blocks = 6, block = 4, hkv = 2, D = 8, T = 7;
    const at::Tensor k = at::randn({T, hkv, D}).to(dtype), v = at::randn({T, hkv, D}).to(dtype);
    const at::Tensor slots = at::tensor(std::vector<std::int64_t>{0, 5, 6, 23, 12, 13, 3}, at::kLong);
    at::Tensor kc = at::zeros({blocks, block, hkv, D}, dtype), vc = at::zeros({blocks, block, hkv, D}, dtype);
    at::Tensor rk = kc.clone(), rv = vc.clone();
    cpu::WriteKvCache(k, v, kc, vc, slots);
    reference::WriteKvCache(k, v, rk, rv, slots);
    EXPECT_TRUE(at::equal(kc, rk));
    EXPECT_TRUE(at::equal(vc, rv));
    const at::Tensor bad = at::tensor(std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, blocks * block}, at::kLong);
    EXPECT_THROW(cpu::WriteKvCache(k, v, kc, vc, bad), c10::Error);
    const at::Tensor negative = at::tensor(std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, -2}, at::kLong);
    EXPECT_THROW(cpu::WriteKvCache(k, v, kc, vc, negative), c10::Error);
  }
}

// Rows with slot -1 (a padded batch's filler rows) are not written; the
// others are, by both implementations.
TEST(WriteKvCache, SkipsPaddingRows) {
  at::manual_seed(10);
  const std::int64_t blocks = 3, block = 4, hkv = 2, D = 8, T = 5;
  const at::Tensor k = at::randn({T, hkv, D}), v = at::randn({T, hkv, D});
  const at::Tensor slots = at::tensor(std::vector<std::int64_t>{4, -1, 7, -1, 0}, at::kLong);
  at::Tensor kc = at::zeros({blocks, block, hkv, D}), vc = at::zeros({blocks, block, hkv, D});
  at::Tensor rk = kc.clone(), rv = vc.clone();
  cpu::WriteKvCache(k, v, kc, vc, slots);
  reference::WriteKvCache(k, v, rk, rv, slots);
  EXPECT_TRUE(at::equal(kc, rk));
  EXPECT_TRUE(at::equal(vc, rv));
  const at::Tensor flat = kc.view({-1, hkv, D});
  EXPECT_TRUE(at::equal(flat[4], k[0]));
  EXPECT_TRUE(at::equal(flat[7], k[2]));
  EXPECT_TRUE(at::equal(flat[0], k[4]));
  EXPECT_EQ(at::count_nonzero(flat).item<std::int64_t>(), 3 * hkv * D);  // nothing else written
}

}  // namespace
}  // namespace ropeserve
