// The packed bf16 GEMM (kernels/cpu/packed_linear.h) against float64 maths
// on the same bfloat16 values, with a bound derived from its arithmetic,
// and against at::linear on the unpacked weights; the packing itself
// (round trip, row lookup) exactly.
#include "kernels/cpu/packed_linear.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_config.h"
#include "tests/kernels/linear_bound.h"

namespace ropeserve {
namespace {

struct Case {
  std::int64_t M, K, N;
  bool bias;
};

class PackedLinear : public ::testing::TestWithParam<Case> {};

TEST_P(PackedLinear, MatchesExactMathsWithinFloat32SumsAndOneRounding) {
  const Case c = GetParam();
  at::manual_seed(c.M * 131 + c.K * 7 + c.N);
  const at::Tensor x = at::randn({c.M, c.K}).to(at::kBFloat16);
  const at::Tensor w = (at::randn({c.N, c.K}) * 0.05).to(at::kBFloat16);
  const at::Tensor b = c.bias ? at::randn({c.N}).to(at::kBFloat16) : at::Tensor();
  const cpu::PackedWeight packed = cpu::PackWeight(w);
  const at::Tensor got = cpu::PackedLinear(x, packed, b);
  ASSERT_EQ(got.sizes(), (std::vector<std::int64_t>{c.M, c.N}));
  ASSERT_EQ(got.scalar_type(), at::kBFloat16);
  // bf16 x bf16 products are exact in float32; K + 1 float32 additions
  // (the bias last), then one rounding to bf16.
  const auto [exact, bound] = testing::ExactBf16Linear(x.to(at::kDouble), w.to(at::kDouble), b, c.K + 1);
  const at::Tensor err = (got.to(at::kDouble) - exact).abs();
  EXPECT_TRUE((err <= bound).all().item<bool>()) << "worst excess " << (err - bound).max().item<double>();
  EXPECT_LT(bound.max().item<double>(), 0.01 * exact.abs().max().item<double>() + 1e-6);
  // at::linear rounds the same sums in its own order: both within the bound of exact.
  const at::Tensor lib = c.bias ? at::linear(x, w, b) : at::linear(x, w);
  EXPECT_TRUE(((got.to(at::kDouble) - lib.to(at::kDouble)).abs() <= 2 * bound + 1e-6).all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(Shapes, PackedLinear,
                         ::testing::Values(Case{1, 896, 1152, true},  // Qwen2.5-0.5B fused q/k/v
                                           Case{1, 4864, 896, false}, Case{2, 896, 9728, false},
                                           Case{6, 896, 64, false}, Case{7, 64, 130, true}, Case{4, 17, 5, false},
                                           Case{5, 33, 9, true}, Case{8, 896, 1003, false}, Case{13, 100, 1, true},
                                           Case{1, 31, 3, false}, Case{1, 1, 7, true}, Case{3, 2, 65, false},
                                           Case{16, 896, 4864, false}, Case{17, 4867, 63, true},
                                           Case{32, 70, 128, false}, Case{64, 896, 129, true},
                                           Case{100, 257, 200, false}, Case{300, 896, 1003, true},
                                           // AMX tiles where the CPU has them (M >= 32, K % 32 == 0):
                                           // one row past a 32-row block, N past a panel, one feature.
                                           Case{32, 896, 64, false}, Case{33, 64, 130, true},
                                           Case{96, 4864, 200, false}, Case{40, 32, 1, true}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return "M" + std::to_string(c.M) + "_K" + std::to_string(c.K) + "_N" + std::to_string(c.N) +
                                  (c.bias ? "_bias" : "");
                         });

// The kernel configuration's amx_min_rows for one scope (0: AVX-512 only).
class AmxMinRows {
 public:
  explicit AmxMinRows(std::int64_t rows) : saved_(cpu::GetKernelConfig()) {
    cpu::KernelConfig c = saved_;
    c.amx_min_rows = rows;
    cpu::SetKernelConfig(c);
  }
  ~AmxMinRows() { cpu::SetKernelConfig(saved_); }

 private:
  cpu::KernelConfig saved_;
};

// Where the CPU has AMX-BF16 the tile kernel takes the rows the
// configuration gives it, and agrees with the AVX-512 kernel within twice
// the bound of each (the same exact products, float32 sums in two orders);
// bf16, int8 and int4 weights (the latter two widened panel by panel).
TEST(PackedLinearAmx, TilesAgreeWithTheAvx512Kernel) {
  if (!cpu::CpuHasAmxBf16()) GTEST_SKIP() << "this CPU (or OS) gives no AMX-BF16";
  {
    AmxMinRows from(32);  // the default, whatever the environment says
    EXPECT_TRUE(cpu::PackedLinearUsesAmx(32, 896));
    EXPECT_FALSE(cpu::PackedLinearUsesAmx(31, 896));
    EXPECT_FALSE(cpu::PackedLinearUsesAmx(32, 70));  // K not a multiple of 32
  }
  {
    AmxMinRows off(0);
    EXPECT_FALSE(cpu::PackedLinearUsesAmx(512, 896));
  }
  at::manual_seed(5);
  const std::int64_t M = 70, K = 256, N = 150;
  const at::Tensor x = at::randn({M, K}).to(at::kBFloat16);
  const at::Tensor w = (at::randn({N, K}) * 0.05).to(at::kBFloat16);
  const at::Tensor b = at::randn({N}).to(at::kBFloat16);
  const cpu::PackedWeight packed = cpu::PackWeight(w);
  const auto [exact, bound] = testing::ExactBf16Linear(x.to(at::kDouble), w.to(at::kDouble), b, K + 1);
  at::Tensor tiles, vectors;
  {
    AmxMinRows on(1);
    tiles = cpu::PackedLinear(x, packed, b);
  }
  {
    AmxMinRows off(0);
    vectors = cpu::PackedLinear(x, packed, b);
  }
  EXPECT_TRUE(((tiles.to(at::kDouble) - exact).abs() <= bound).all().item<bool>());
  EXPECT_TRUE(((tiles.to(at::kDouble) - vectors.to(at::kDouble)).abs() <= 2 * bound + 1e-6).all().item<bool>());
  // A wrong pair line, feature or row would be O(|y|) off.
  EXPECT_LT(bound.max().item<double>(), 0.01 * exact.abs().max().item<double>() + 1e-6);
}

TEST(PackedWeight, RoundTripsAndLooksUpRowsExactly) {
  for (const auto& [n, k] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {5, 3}, {64, 896}, {130, 17}}) {
    const at::Tensor w = at::randn({n, k}).to(at::kBFloat16);
    const cpu::PackedWeight p = cpu::PackWeight(w);
    EXPECT_EQ(p.data.size(0), (n + 63) / 64);
    EXPECT_EQ(p.data.size(1), (k + 1) / 2);
    EXPECT_TRUE(at::equal(cpu::UnpackWeight(p), w));
    const at::Tensor ids = at::randint(0, n, {9}, at::kLong);
    EXPECT_TRUE(at::equal(cpu::PackedRows(p, ids), at::embedding(w, ids)));
  }
  // Float32 weights are rounded to bfloat16 once.
  const at::Tensor w32 = at::randn({3, 4});
  EXPECT_TRUE(at::equal(cpu::UnpackWeight(cpu::PackWeight(w32)), w32.to(at::kBFloat16)));
}

TEST(PackedLinearLimits, BadShapesAreRefused) {
  const cpu::PackedWeight p = cpu::PackWeight(at::randn({8, 16}));
  EXPECT_THROW(cpu::PackedLinear(at::randn({2, 16}), p, at::Tensor()), c10::Error);  // float32 x
  EXPECT_THROW(cpu::PackedLinear(at::randn({2, 15}).to(at::kBFloat16), p, at::Tensor()), c10::Error);
  EXPECT_THROW(cpu::PackedLinear(at::randn({2, 16}).to(at::kBFloat16), p, at::randn({7})), c10::Error);
}

// Not a test: prints GFLOP/s of the packed kernel and at::linear (oneDNN)
// side by side, per rows of x, on the Qwen2.5-0.5B
// gate/up and down shapes (run with --gtest_also_run_disabled_tests).
TEST(PackedLinearSpeed, DISABLED_PrintThroughput) {
  for (const auto& [N, K] : std::vector<std::pair<std::int64_t, std::int64_t>>{{9728, 896}, {896, 4864}}) {
    const at::Tensor w = at::randn({N, K}).to(at::kBFloat16);
    const int copies = 12;  // 12 x 17 MB: beyond the caches
    std::vector<at::Tensor> ws;
    std::vector<cpu::PackedWeight> ps;
    for (int i = 0; i < copies; ++i) {
      ws.push_back(w.clone());
      ps.push_back(cpu::PackWeight(w));
    }
    for (std::int64_t M : {1, 4, 8, 16, 32, 64, 128, 512}) {
      const at::Tensor x = at::randn({M, K}).to(at::kBFloat16);
      const double flop = copies * 2.0 * static_cast<double>(M) * static_cast<double>(w.numel());
      auto time = [&](auto&& f) {
        double best = 1e30;
        for (int rep = 0; rep < 3; ++rep) {
          auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < copies; ++i) f(i);
          best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return flop / best / 1e9;
      };
      double packed = 0, tiles = 0;
      {
        AmxMinRows off(0);
        packed = time([&](int i) { cpu::PackedLinear(x, ps[i], at::Tensor()); });
      }
      if (cpu::CpuHasAmxBf16()) {
        AmxMinRows on(1);
        tiles = time([&](int i) { cpu::PackedLinear(x, ps[i], at::Tensor()); });
      }
      const double onednn = time([&](int i) { at::linear(x, ws[i]); });
      std::printf("N=%ld K=%ld M=%ld  packed %.0f  amx %.0f  at::linear %.0f GFLOP/s\n", static_cast<long>(N),
                  static_cast<long>(K), static_cast<long>(M), packed, tiles, onednn);
    }
  }
}

// Not a test: one decode step's projections of the Qwen2.5-0.5B shape at
// one row (24 x (q/k/v, o, gate/up, down) and the LM head), packed, the
// weights read once each as in a decode step: prints ms per step and the
// GB/s it reads (run with --gtest_also_run_disabled_tests).
TEST(PackedLinearSpeed, DISABLED_PrintDecodeStep) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> layer{{1152, 896}, {896, 896}, {9728, 896}, {896, 4864}};
  std::vector<cpu::PackedWeight> ps;
  double bytes = 0;
  for (int l = 0; l < 24; ++l)
    for (const auto& [N, K] : layer) {
      ps.push_back(cpu::PackWeight(at::randn({N, K}).to(at::kBFloat16)));
      bytes += 2.0 * static_cast<double>(N * K);
    }
  ps.push_back(cpu::PackWeight(at::randn({151936, 896}).to(at::kBFloat16)));
  bytes += 2.0 * 151936 * 896;
  std::vector<at::Tensor> xs;
  for (const auto& p : ps) xs.push_back(at::randn({1, p.k}).to(at::kBFloat16));
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < ps.size(); ++i) cpu::PackedLinear(xs[i], ps[i], at::Tensor());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("decode step projections: %.2f ms, %.1f GB/s\n", s * 1e3, bytes / s / 1e9);
  }
}

}  // namespace
}  // namespace ropeserve
