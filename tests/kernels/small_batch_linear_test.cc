// The AVX-512-BF16 small-batch linear kernel against float32 maths on the
// same bfloat16 inputs (rounded once, as the kernel does), and against
// at::linear, for decode-sized batches and real and odd widths.
#include "kernels/cpu/small_batch_linear.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

namespace ropeserve {
namespace {

struct Case {
  int64_t M, K, N;
  bool bias;
};

class SmallBatchLinear : public ::testing::TestWithParam<Case> {};

TEST_P(SmallBatchLinear, MatchesFloatMathsAndAtLinear) {
  const Case c = GetParam();
  at::manual_seed(c.M * 131 + c.K * 7 + c.N);
  const at::Tensor x = at::randn({c.M, c.K}).to(at::kBFloat16);
  const at::Tensor w = (at::randn({c.N, c.K}) * 0.05).to(at::kBFloat16);
  const at::Tensor b = c.bias ? at::randn({c.N}).to(at::kBFloat16) : at::Tensor();
  if (!cpu::SmallBatchLinearSupports(x, w, b)) GTEST_SKIP() << "this CPU has no avx512_bf16";
  const at::Tensor got = cpu::SmallBatchLinear(x, w, b);
  at::Tensor exact = at::linear(x.to(at::kFloat), w.to(at::kFloat));
  if (c.bias) exact = exact + b.to(at::kFloat);
  // One rounding of a float32 sum: within a bf16 unit of the exact result
  // (the summation order differs).
  EXPECT_TRUE(at::allclose(got.to(at::kFloat), exact, 1.0 / 128, 1e-2))
      << (got.to(at::kFloat) - exact).abs().max().item<float>();
  const at::Tensor lib = c.bias ? at::linear(x, w, b) : at::linear(x, w);
  EXPECT_TRUE(at::allclose(got.to(at::kFloat), lib.to(at::kFloat), 2.0 / 128, 2e-2));
}

INSTANTIATE_TEST_SUITE_P(Shapes, SmallBatchLinear,
                         ::testing::Values(Case{1, 896, 896, false}, Case{1, 896, 128, true},  // Qwen2.5 q/k proj
                                           Case{1, 4864, 896, false}, Case{2, 896, 4864, false},
                                           Case{3, 64, 130, true}, Case{4, 17, 5, false}, Case{5, 33, 9, true},
                                           Case{8, 896, 1003, false}, Case{7, 100, 1, true}, Case{1, 31, 3, false},
                                           // several passes of 8 rows over blocks of 16 weight rows
                                           Case{9, 896, 33, true}, Case{16, 896, 4864, false},
                                           Case{31, 4864, 17, false}, Case{33, 70, 40, true},
                                           Case{64, 896, 128, false}));

TEST(SmallBatchLinearLimits, OtherShapesAndDtypesAreLeftToAtLinear) {
  const at::Tensor w = at::randn({8, 16}).to(at::kBFloat16);
  const at::Tensor too_many = at::randn({cpu::kSmallBatchKernelMaxRows + 1, 16}).to(at::kBFloat16);
  EXPECT_FALSE(cpu::SmallBatchLinearSupports(too_many, w, at::Tensor()));
  const at::Tensor past_choice = at::randn({cpu::SmallBatchMaxRows() + 1, 16}).to(at::kBFloat16);
  EXPECT_FALSE(cpu::SmallBatchLinearApplies(past_choice, w, at::Tensor()));  // at::linear's, by choice
  EXPECT_FALSE(cpu::SmallBatchLinearApplies(at::randn({1, 16}), w, at::Tensor()));                     // float32
  EXPECT_FALSE(cpu::SmallBatchLinearApplies(at::randn({1, 15}).to(at::kBFloat16), w, at::Tensor()));   // K differs
  EXPECT_FALSE(cpu::SmallBatchLinearApplies(at::randn({1, 16}).to(at::kBFloat16), w.t(), at::Tensor()));
}

}  // namespace
}  // namespace ropeserve

namespace ropeserve {
namespace {

// Not a test: prints the kernel's weight-read bandwidth (run with
// --gtest_also_run_disabled_tests). Speed is reported, never asserted.
TEST(SmallBatchLinearSpeed, DISABLED_PrintBandwidth) {
  const at::Tensor w = at::randn({4864, 896}).to(at::kBFloat16);
  std::vector<at::Tensor> ws;
  for (int i = 0; i < 48; ++i) ws.push_back(w.clone());  // 48 x 8.7 MB: far beyond the caches
  {
    const at::Tensor big = at::cat(ws);
    for (int rep = 0; rep < 2; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      volatile float f = big.sum().item<float>();
      (void)f;
      std::printf("at::sum read %.1f GB/s\n",
                  big.numel() * 2 / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9);
    }
  }
  for (int64_t M : {1, 4, 8, 16, 32, 64}) {
    const at::Tensor x = at::randn({M, 896}).to(at::kBFloat16);
    if (!cpu::SmallBatchLinearSupports(x, w, at::Tensor())) GTEST_SKIP();
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (const auto& wi : ws) cpu::SmallBatchLinear(x, wi, at::Tensor());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      auto t1 = std::chrono::steady_clock::now();
      for (const auto& wi : ws) at::linear(x, wi);
      const double s2 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      const double flop = 48.0 * 2 * static_cast<double>(M) * static_cast<double>(w.numel());
      std::printf("M=%ld kernel %.1f GB/s %.0f GFLOP/s   at::linear %.1f GB/s %.0f GFLOP/s\n", static_cast<long>(M),
                  48 * w.numel() * 2 / s / 1e9, flop / s / 1e9, 48 * w.numel() * 2 / s2 / 1e9, flop / s2 / 1e9);
      if (M == 8) {  // the kernel's former way: two passes of 4 rows over all the weights
        const at::Tensor lo = x.narrow(0, 0, 4), hi = x.narrow(0, 4, 4);
        auto t2 = std::chrono::steady_clock::now();
        for (const auto& wi : ws) {
          cpu::SmallBatchLinear(lo, wi, at::Tensor());
          cpu::SmallBatchLinear(hi, wi, at::Tensor());
        }
        const double s3 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
        std::printf("M=8 as 2 x 4 rows %.0f GFLOP/s\n", flop / s3 / 1e9);
      }
    }
  }
}

}  // namespace
}  // namespace ropeserve
