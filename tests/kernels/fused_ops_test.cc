// The fused CPU kernels against kernels/reference on random inputs of many
// shapes: row widths of real models and odd ones (vector tails), GQA ratios
// 1/2/4/8, head_dim 64 and 128, full and partial rotary, float32 and
// bfloat16.
#include "kernels/cpu/fused_ops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/reference/reference_ops.h"
#include "tests/common/float_bounds.h"

namespace ropeserve {
namespace {

// bfloat16 has 8 significant bits: the fused kernels round once where the
// reference rounds after every op, so allow two units in the last place.
// float32: a row's norm sums n squares in a different order (vectorized):
// their mean is within gamma_n of each other (float_bounds.h), the output
// within half that plus a few roundings of the scaling.
void ExpectClose(const at::Tensor& got, const at::Tensor& want, at::ScalarType dtype) {
  ASSERT_EQ(got.sizes(), want.sizes());
  ASSERT_EQ(got.scalar_type(), want.scalar_type());
  const std::int64_t n = got.size(-1);
  const double f32 = testing::Gamma(n, testing::kF32Roundoff) + 8 * testing::kF32Roundoff;
  const double rtol = dtype == at::kFloat ? f32 : 2.0 / 128;
  const double atol = dtype == at::kFloat ? f32 : 2e-2;
  EXPECT_TRUE(at::allclose(got.to(at::kFloat), want.to(at::kFloat), rtol, atol))
      << "max abs diff " << (got.to(at::kFloat) - want.to(at::kFloat)).abs().max().item<float>();
}

struct NormCase {
  std::int64_t rows, n;
};

class RmsNormKernel : public ::testing::TestWithParam<std::tuple<NormCase, at::ScalarType>> {};

TEST_P(RmsNormKernel, MatchesReference) {
  const auto [c, dtype] = GetParam();
  at::manual_seed(c.rows * 1000 + c.n);
  const at::Tensor x = (at::randn({c.rows, c.n}) * 3).to(dtype);
  const at::Tensor w = (1 + 0.1 * at::randn({c.n})).to(dtype);
  ExpectClose(cpu::RmsNorm(x, w, 1e-6), reference::RmsNorm(x, w, 1e-6), dtype);
  // Per-head norm (Qwen3 q_norm/k_norm): [T, H, D] rows.
  const at::Tensor heads = x.view({c.rows, 1, c.n});
  ExpectClose(cpu::RmsNorm(heads, w, 1e-6), reference::RmsNorm(heads, w, 1e-6), dtype);
}

TEST_P(RmsNormKernel, AddRmsNormUpdatesResidualExactly) {
  const auto [c, dtype] = GetParam();
  at::manual_seed(c.rows * 7 + c.n);
  const at::Tensor x = at::randn({c.rows, c.n}).to(dtype);
  const at::Tensor h0 = (at::randn({c.rows, c.n}) * 4).to(dtype);
  const at::Tensor w = (1 + 0.1 * at::randn({c.n})).to(dtype);
  at::Tensor h = h0.clone();
  const at::Tensor out = cpu::AddRmsNorm(x, h, w, 1e-5);
  const at::Tensor want_h = h0 + x;  // rounds once in the storage dtype, like the fused add
  EXPECT_TRUE(at::equal(h, want_h));
  ExpectClose(out, reference::RmsNorm(want_h, w, 1e-5), dtype);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormKernel,
                         ::testing::Combine(::testing::Values(NormCase{1, 64}, NormCase{3, 128}, NormCase{33, 896},
                                                              NormCase{5, 4864}, NormCase{7, 17}, NormCase{2, 1}),
                                            ::testing::Values(at::kFloat, at::kBFloat16)));

struct RopeCase {
  std::int64_t T, hq, hkv, D, rotary;
};

class RopeKernel : public ::testing::TestWithParam<std::tuple<RopeCase, at::ScalarType>> {};

TEST_P(RopeKernel, MatchesReference) {
  const auto [c, dtype] = GetParam();
  at::manual_seed(c.T * 31 + c.hq * 7 + c.D);
  const at::Tensor q = at::randn({c.T, c.hq, c.D}).to(dtype);
  const at::Tensor k = at::randn({c.T, c.hkv, c.D}).to(dtype);
  at::Tensor inv_freq = at::pow(10000.0, -at::arange(0, c.rotary, 2, at::kFloat) / c.rotary);
  at::Tensor positions = at::arange(100, 100 + c.T, at::kLong) * 37;  // large positions: big angles
  auto [cos, sin] = reference::RopeCosSin(inv_freq, positions, 1.0, dtype);
  at::Tensor q2 = q.clone(), k2 = k.clone();
  cpu::ApplyRopeInplace(q2, k2, cos, sin);
  ExpectClose(q2, reference::ApplyRope(q, cos, sin), dtype);
  ExpectClose(k2, reference::ApplyRope(k, cos, sin), dtype);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeKernel,
                         ::testing::Combine(::testing::Values(RopeCase{1, 8, 8, 64, 64},      // GQA 1
                                                              RopeCase{5, 8, 4, 64, 64},      // GQA 2
                                                              RopeCase{3, 16, 4, 128, 128},   // GQA 4
                                                              RopeCase{64, 14, 2, 64, 64},    // GQA 7 (Qwen2.5-0.5B)
                                                              RopeCase{17, 32, 4, 128, 128},  // GQA 8
                                                              RopeCase{9, 8, 2, 128, 64},     // partial rotary
                                                              RopeCase{4, 4, 4, 64,
                                                                       16}),  // rotary narrower than a vector
                                            ::testing::Values(at::kFloat, at::kBFloat16)));

// silu(gate) * up against the two LibTorch ops (the reference rounds after
// each, as the kernel does: a unit of bf16 apart at most where the two exp
// implementations land on either side of a rounding) and float64 maths
// (two roundings of the dtype); saturated gates (+-100) and odd widths.
TEST(SiluAndMul, MatchesTheTwoOpsAndExactMaths) {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const std::int64_t I : {1, 17, 896, 4864}) {
      for (const std::int64_t T : {1, 5, 40}) {
        at::manual_seed(T * 100 + I);
        at::Tensor gate_up = (at::randn({T, 2 * I}) * 4).to(dtype);
        gate_up[0][0] = 100.0;
        if (I > 1) gate_up[0][1] = -100.0;
        const at::Tensor got = cpu::SiluAndMul(gate_up);
        const at::Tensor want = at::silu(gate_up.narrow(1, 0, I)) * gate_up.narrow(1, I, I);
        ExpectClose(got, want, dtype);
        const at::Tensor g64 = gate_up.narrow(1, 0, I).to(at::kDouble), u64 = gate_up.narrow(1, I, I).to(at::kDouble);
        const at::Tensor exact = g64 / (1 + at::exp(-g64)) * u64;
        // Every ISA's kernel rounds twice (silu, product), after float32
        // arithmetic within a few units of float32.
        const double bf16_roundings = 2;
        const double rel = dtype == at::kFloat ? 8 * testing::kF32Roundoff : bf16_roundings * testing::kBF16Roundoff;
        EXPECT_TRUE(((got.to(at::kDouble) - exact).abs() <= rel * exact.abs() + 1e-30).all().item<bool>())
            << "dtype " << dtype << " I " << I << " T " << T << " worst excess "
            << ((got.to(at::kDouble) - exact).abs() - rel * exact.abs()).max().item<double>();
      }
    }
  }
  EXPECT_THROW(cpu::SiluAndMul(at::randn({2, 7})), c10::Error);
}

TEST(FusedOps, RejectWrongShapes) {
  const at::Tensor x = at::randn({2, 8});
  EXPECT_THROW(cpu::RmsNorm(x, at::ones({7}), 1e-6), c10::Error);
  at::Tensor q = at::randn({2, 4, 64}), k = at::randn({2, 2, 64});
  EXPECT_THROW(cpu::ApplyRopeInplace(q, k, at::randn({2, 65}), at::randn({2, 65})), c10::Error);
  EXPECT_THROW(cpu::ApplyRopeInplace(q, k, at::randn({3, 64}), at::randn({3, 64})), c10::Error);
}

}  // namespace
}  // namespace ropeserve
