// The group-wise int4 weights (kernels/int4_weight.h) and the CPU's kernels over them (kernels/cpu/int4_linear.h): the
// quantization's bound (each weight within half its group's scale), the
// packing round trip, and the kernel against float64 maths on the
// dequantized weights, with bounds derived from its arithmetic as the int8
// kernel's test does: the activations' int16 rounding (half a level per
// element, weighted by |w|) or, on an ISA with the int8-x form, its exact
// levels per group, float32 sums over the groups, and for
// bfloat16 outputs one final rounding. Odd shapes included: K % 64 == 32
// (a half block of padding), one output row, 16 and 48 rows of x.
#include "kernels/cpu/int4_linear.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

#include "kernels/cpu/int8_linear.h"
#include "kernels/cpu/kernel_table.h"
#include "tests/common/float_bounds.h"

namespace ropeserve {
namespace {

struct Case {
  std::int64_t M, K, N, group;
  bool bias, symmetric;
  at::ScalarType dtype;
};

class Int4Linear : public ::testing::TestWithParam<Case> {};

// The weights of a test: random, with a zero group and a constant group.
at::Tensor Weights(std::int64_t N, std::int64_t K, std::int64_t group) {
  at::Tensor w = at::randn({N, K}) * 0.05;
  w[0].narrow(0, 0, group).zero_();
  if (N > 1) w[N - 1].narrow(0, K - group, group).fill_(0.03);
  return w;
}

// x [M, K] as the int4 kernel's int8-x form sees it, in float64: per group
// of columns, levels round(x * (127 / max|x|)) (float32 arithmetic, ties to
// even) times the scale max|x| / 127 (kernels/cpu/int4_linear.h).
at::Tensor GroupLevels(const at::Tensor& x, std::int64_t group) {
  const std::int64_t M = x.size(0), K = x.size(1);
  const at::Tensor xf = x.to(at::kFloat).reshape({M, K / group, group});
  const at::Tensor amax = xf.abs().amax(2, true);
  const at::Tensor inv = at::where(amax > 0, at::full_like(amax, 127.0f) / amax, at::zeros_like(amax));
  const at::Tensor levels = at::round(xf * inv).clamp(-128, 127);
  return (levels.to(at::kDouble) * (amax / 127.0f).to(at::kDouble)).reshape({M, K});
}

TEST_P(Int4Linear, QuantizesWithinHalfAScaleAndPacksBack) {
  const Case c = GetParam();
  at::manual_seed(c.K * 3 + c.N);
  const at::Tensor w = Weights(c.N, c.K, c.group);
  const Int4Weight q = QuantizeInt4(w.to(c.dtype), c.group, c.symmetric);
  ASSERT_EQ(q.k, c.K);
  ASSERT_EQ(q.packed.size(1), (c.K + 63) / 64 * 32);
  ASSERT_EQ(q.scale.sizes(), (std::vector<std::int64_t>{c.N, c.K / c.group}));
  if (c.symmetric) {
    EXPECT_TRUE((q.zero == 8).all().item<bool>());
  }
  // The scales are float16 values, rounded up: never below what spans the group.
  ASSERT_TRUE(q.scale16.defined());
  EXPECT_TRUE(at::equal(q.scale16.to(at::kFloat), q.scale));
  const at::Tensor groups = w.to(c.dtype).to(at::kFloat).reshape({c.N, c.K / c.group, c.group});
  const at::Tensor span = c.symmetric
                              ? groups.abs().amax(2) / 7.0
                              : (at::clamp_min(groups.amax(2), 0.0) - at::clamp_max(groups.amin(2), 0.0)) / 15.0;
  EXPECT_TRUE((q.scale >= span).all().item<bool>());
  EXPECT_TRUE((q.scale <= span * (1 + 0x1p-10)).all().item<bool>());
  const at::Tensor levels = UnpackInt4(q);
  EXPECT_LE(levels.max().item<int>(), 15);
  // Packing the levels again gives the same bytes.
  const Int4Weight again = PackInt4(levels, q.scale, q.zero, c.group);
  EXPECT_TRUE(at::equal(again.packed, q.packed));
  // |dequantized - w| <= scale / 2 (+ the float32 arithmetic of w / scale
  // and of the product: a few units of 2^-24 of |w|).
  const at::Tensor w64 = w.to(c.dtype).to(at::kDouble);
  const at::Tensor deq = DequantizeInt4(q, at::kDouble);
  const at::Tensor half = q.scale.to(at::kDouble).repeat_interleave(c.group, 1) / 2;
  const at::Tensor err = (deq - w64).abs();
  const at::Tensor bound = half * (1 + 1e-5) + 4 * testing::kF32Roundoff * w64.abs() + 1e-30;
  EXPECT_TRUE((err <= bound).all().item<bool>()) << "worst excess " << (err - bound).max().item<double>();
  // The zero group stays zero.
  EXPECT_EQ(deq[0].narrow(0, 0, c.group).abs().max().item<double>(), 0.0);
}

TEST_P(Int4Linear, KernelMatchesExactMathsWithinTheQuantizationBound) {
  const Case c = GetParam();
  at::manual_seed(c.M * 131 + c.K * 7 + c.N);
  const at::Tensor x = at::randn({c.M, c.K}).to(c.dtype);
  const Int4Weight w = QuantizeInt4(Weights(c.N, c.K, c.group), c.group, c.symmetric);
  const at::Tensor b = c.bias ? at::randn({c.N}).to(c.dtype) : at::Tensor();
  ASSERT_TRUE(cpu::Int4KernelSupports(x, w)) << "every ISA has a variant";
  const at::Tensor got = cpu::Int4LinearKernel(x, w, b);
  ASSERT_EQ(got.scalar_type(), c.dtype);
  ASSERT_EQ(got.sizes(), (std::vector<std::int64_t>{c.M, c.N}));
  const at::Tensor w64 = DequantizeInt4(w, at::kDouble);
  // The int8-x form's levels are reproduced here exactly (its quantization
  // is tested in kernel_cores_test): only the float32 sums remain. The
  // int16 form's rounding is counted instead: |x - xq * sx| <= sx / 2.
  const bool int8_x = cpu::ActiveKernels().int4_int8_x;
  const at::Tensor x64 = int8_x ? GroupLevels(x, c.group) : x.to(at::kDouble);
  at::Tensor exact = at::matmul(x64, w64.t());
  if (c.bias) exact = exact + b.to(at::kDouble);
  const at::Tensor sx = x64.abs().amax(1) / cpu::kInt8ActivationLevels;
  const at::Tensor quant =
      int8_x ? at::zeros_like(exact) : 0.5 * 1.001 * sx.unsqueeze(1) * w64.abs().sum(1).unsqueeze(0);
  // float32: the per-group products by the scale and their sums (K / group
  // terms per lane, 16 lanes, the row scale and the bias): gamma of K
  // additions of |x||w| is a generous cover.
  const at::Tensor magnitude =
      at::matmul(x64.abs(), w64.abs().t()) + (c.bias ? b.to(at::kDouble).abs().unsqueeze(0) : at::zeros_like(exact));
  const at::Tensor accum = testing::Gamma(2 * (c.K / c.group) + 20, testing::kF32Roundoff) * magnitude;
  const at::Tensor round = c.dtype == at::kBFloat16 ? exact.abs() / 256.0 : at::zeros_like(exact);
  const at::Tensor bound = quant + accum + round + 1e-30;
  const at::Tensor err = (got.to(at::kDouble) - exact).abs();
  EXPECT_TRUE((err <= bound).all().item<bool>()) << "worst excess " << (err - bound).max().item<double>();
  // The bound is far below the outputs' size: a wrong group, zero, scale,
  // nibble or row would exceed it.
  EXPECT_LT(bound.max().item<double>(), 0.02 * exact.abs().max().item<double>() + 1e-6);
  // Int4Linear takes the kernel for these rows.
  EXPECT_TRUE(at::equal(cpu::Int4Linear(x, w, b), got));
}

INSTANTIATE_TEST_SUITE_P(Shapes, Int4Linear,
                         ::testing::Values(Case{1, 896, 896, 128, false, false, at::kBFloat16},
                                           Case{1, 896, 128, 64, true, false, at::kBFloat16},
                                           Case{1, 4864, 896, 128, false, true, at::kBFloat16},
                                           Case{2, 896, 130, 32, false, false, at::kFloat},
                                           Case{3, 96, 19, 32, true, false, at::kFloat},
                                           Case{8, 160, 33, 32, true, true, at::kBFloat16},
                                           Case{9, 256, 1, 64, false, false, at::kFloat},
                                           Case{16, 896, 257, 128, true, false, at::kBFloat16},
                                           Case{48, 256, 70, 64, false, false, at::kBFloat16},
                                           Case{5, 32, 7, 32, false, false, at::kBFloat16}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return "M" + std::to_string(c.M) + "_K" + std::to_string(c.K) + "_N" + std::to_string(c.N) +
                                  "_g" + std::to_string(c.group) + (c.bias ? "_bias" : "") +
                                  (c.symmetric ? "_sym" : "") + (c.dtype == at::kBFloat16 ? "_bf16" : "_f32");
                         });

// The kernel reads float16 scales when every scale is one (3 bytes a group
// instead of 5), float32 ones otherwise: the same values, so the same bits
// out. Scales below float16's normal range stay float32 (QuantizeInt4), as
// do checkpoint scales that float16 cannot hold exactly (PackInt4).
TEST(Int4Scales, Float16WhenExactAndTheKernelGivesTheSameBits) {
  at::manual_seed(5);
  const std::int64_t K = 256, N = 70;
  const Int4Weight w = QuantizeInt4(at::randn({N, K}) * 0.05, 128);
  ASSERT_TRUE(w.scale16.defined());
  // Weights so small that a scale falls below 2^-14: float32 scales only.
  const Int4Weight tiny = QuantizeInt4(at::randn({N, K}) * 1e-5, 128);
  EXPECT_FALSE(tiny.scale16.defined());
  // Checkpoint scales: float16 only when exact.
  const at::Tensor levels = UnpackInt4(w);
  EXPECT_TRUE(PackInt4(levels, w.scale, w.zero, 128).scale16.defined());
  EXPECT_FALSE(PackInt4(levels, w.scale * (1 + 0x1p-20), w.zero, 128).scale16.defined());
  // The kernel on either copy.
  Int4Weight f32 = w;
  f32.scale16 = at::Tensor();
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor x = at::randn({3, K}).to(dtype);
    ASSERT_TRUE(cpu::Int4KernelSupports(x, w)) << "every ISA has a variant";
    EXPECT_TRUE(at::equal(cpu::Int4LinearKernel(x, w, at::Tensor()), cpu::Int4LinearKernel(x, f32, at::Tensor())));
  }
}

// More rows than the kernel takes, float32 x: the generic path
// (dequantize + at::linear), float32 GEMM rounding only.
TEST(Int4LinearGeneric, ManyRowsDequantizeForAtLinear) {
  at::manual_seed(11);
  const std::int64_t M = cpu::kInt4KernelMaxRows + 3, K = 256, N = 40;
  const at::Tensor x = at::randn({M, K});
  const Int4Weight w = QuantizeInt4(at::randn({N, K}) * 0.05, 64);
  const at::Tensor b = at::randn({N});
  EXPECT_FALSE(cpu::Int4KernelSupports(x, w));
  const at::Tensor got = cpu::Int4Linear(x, w, b);
  const at::Tensor w64 = DequantizeInt4(w, at::kDouble);
  const at::Tensor exact = at::matmul(x.to(at::kDouble), w64.t()) + b.to(at::kDouble);
  const at::Tensor bound =
      2 * testing::Gamma(K + 2, testing::kF32Roundoff) *
          (at::matmul(x.to(at::kDouble).abs(), w64.abs().t()) + b.to(at::kDouble).abs().unsqueeze(0)) +
      1e-30;
  EXPECT_TRUE(((got.to(at::kDouble) - exact).abs() <= bound).all().item<bool>());
}

// Past the kernel's rows, bfloat16 x on a CPU with avx512_bf16: the panel path. Its
// weights are the dequantized ones rounded to bfloat16 (half a unit of
// 2^-8 each, relative), summed in float32 by the packed GEMM, the output
// rounded to bfloat16 once. Odd shapes: N not a multiple of the 64-feature
// panel, K % 64 == 32 (the last block's high nibbles are padding), groups
// of 32 / 64 / 128, a column permutation (act-order checkpoints).
TEST(Int4LinearPanel, ManyRowsMatchExactMathsOnBf16RoundedWeights) {
  struct P {
    std::int64_t M, K, N, group;
    bool perm;
  };
  for (const P& c : {P{49, 256, 40, 64, false}, P{80, 896, 130, 128, true}, P{3, 96, 65, 32, false},
                     P{64, 4864, 64, 128, false}, P{19, 160, 1, 32, true}}) {
    SCOPED_TRACE("M" + std::to_string(c.M) + " K" + std::to_string(c.K) + " N" + std::to_string(c.N));
    at::manual_seed(c.M + c.K + c.N);
    const at::Tensor x = at::randn({c.M, c.K}).to(at::kBFloat16);
    Int4Weight w = QuantizeInt4(Weights(c.N, c.K, c.group), c.group);
    if (c.perm) w = PackInt4(UnpackInt4(w), w.scale, w.zero, c.group, at::randperm(c.K, at::kLong));
    const at::Tensor b = at::randn({c.N}).to(at::kBFloat16);
    ASSERT_TRUE(cpu::Int4PanelSupports(x, w)) << "every ISA has a variant";
    // The panel path alone, on x in the kernel's column order.
    const at::Tensor got = cpu::Int4PanelLinear(c.perm ? x.index_select(1, w.perm) : x, w, b);
    ASSERT_EQ(got.scalar_type(), at::kBFloat16);
    const at::Tensor x64 = x.to(at::kDouble), w64 = DequantizeInt4(w, at::kDouble);
    const at::Tensor exact = at::matmul(x64, w64.t()) + b.to(at::kDouble);
    const at::Tensor magnitude = at::matmul(x64.abs(), w64.abs().t()) + b.to(at::kDouble).abs().unsqueeze(0);
    const at::Tensor bound =
        (0x1p-9 + testing::Gamma(c.K + 2, testing::kF32Roundoff)) * magnitude * 1.001 + exact.abs() / 256.0 + 1e-30;
    const at::Tensor err = (got.to(at::kDouble) - exact).abs();
    EXPECT_TRUE((err <= bound).all().item<bool>()) << "worst excess " << (err - bound).max().item<double>();
    // Far below the outputs (random sums cancel: |y| ~ sqrt(K), the bound ~ K):
    // a wrong group, zero, nibble or permutation exceeds it.
    EXPECT_LT(bound.max().item<double>(), 0.05 * exact.abs().max().item<double>());
    // Int4Linear takes it past the ISA's crossover.
    if (c.M > cpu::ActiveKernels().int4_kernel_max_rows) {
      EXPECT_TRUE(at::equal(cpu::Int4Linear(x, w, b), got));
    }
  }
}

// Int4Linear runs the matrix-vector kernel up to the active ISA's crossover
// and the panel path past it (bfloat16 x); float32 x, which the panels do
// not take, stays on the kernel past it. (ctest runs this once per ISA the
// CPU runs: AVX2's crossover is every row count, VNNI's 48.)
TEST(Int4Linear, KernelUpToTheIsasCrossoverThenPanels) {
  const std::int64_t crossover = cpu::ActiveKernels().int4_kernel_max_rows;
  const Int4Weight w = QuantizeInt4(Weights(24, 128, 64), 64);
  for (std::int64_t M : {std::int64_t{1}, std::int64_t{17}, std::min<std::int64_t>(crossover, 70), std::int64_t{70}}) {
    SCOPED_TRACE("M" + std::to_string(M) + " crossover " + std::to_string(crossover));
    at::manual_seed(M);
    const at::Tensor x = at::randn({M, 128}).to(at::kBFloat16);
    const at::Tensor want =
        M <= crossover ? cpu::Int4LinearKernel(x, w, at::Tensor()) : cpu::Int4PanelLinear(x, w, at::Tensor());
    EXPECT_TRUE(at::equal(cpu::Int4Linear(x, w, at::Tensor()), want));
    const at::Tensor xf = x.to(at::kFloat);
    EXPECT_TRUE(at::equal(cpu::Int4Linear(xf, w, at::Tensor()), cpu::Int4LinearKernel(xf, w, at::Tensor())));
  }
}

TEST(Int4Quantize, RefusesGroupsThatDoNotDivideK) {
  EXPECT_THROW(QuantizeInt4(at::randn({2, 100}), 64), c10::Error);
  EXPECT_THROW(QuantizeInt4(at::randn({2, 128}), 48), c10::Error);
  EXPECT_THROW(PackInt4(at::full({2, 64}, 16, at::kByte), at::ones({2, 1}), at::zeros({2, 1}, at::kByte), 64),
               c10::Error);
}

// Not a test: prints the int4 kernel's time per token beside the int8
// kernel's on the same 48 matrices of Qwen2.5-0.5B's MLP shapes (4864 x
// 896, then the down projection's 896 x 4864: far beyond the caches), as
// weight bytes read per second and as multiply-adds (run with
// --gtest_also_run_disabled_tests; the bench that records figures is
// bench/ and docs/benchmarks.md).
TEST(Int4LinearSpeed, DISABLED_PrintBandwidth) {
  for (const auto& [N, K] : {std::pair<std::int64_t, std::int64_t>{4864, 896}, {896, 4864}}) {
    const at::Tensor wf = at::randn({N, K}) * 0.05;
    std::vector<Int4Weight> q4;
    std::vector<cpu::Int8Weight> q8;
    for (int i = 0; i < 48; ++i) {
      q4.push_back(QuantizeInt4(wf + i * 1e-3, 128));
      q8.push_back(cpu::QuantizeInt8(wf + i * 1e-3));
    }
    std::printf("[%lld x %lld]\n", static_cast<long long>(N), static_cast<long long>(K));
    for (std::int64_t M : {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128, 512, 2048}) {
      const at::Tensor x = at::randn({M, K}).to(at::kBFloat16);
      ASSERT_TRUE(cpu::Int4KernelSupports(x, q4[0])) << "every ISA has a variant";
      const int calls = M > 512 ? 2 : M > 48 ? 8 : 48;  // about the same time a row count
      auto time = [&](auto&& fn) {
        double best = 1e9;
        for (int rep = 0; rep < 5; ++rep) {
          auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < calls; ++i) fn(i);
          best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return best;
      };
      const double t4 = time([&](int i) { cpu::Int4LinearKernel(x, q4[i], at::Tensor()); });
      const double t8 = time([&](int i) { cpu::Int8LinearKernel(x, q8[i], at::Tensor()); });
      // The packed GEMM over widened int4 panels, the path past the kernel's rows.
      const double tp = time([&](int i) { cpu::Int4PanelLinear(x, q4[i], at::Tensor()); });
      const double tp8 = time([&](int i) { cpu::Int8PanelLinear(x, q8[i], at::Tensor()); });
      const double weights = calls * static_cast<double>(N * K), flops = 2.0 * weights * M;
      // Nibbles + (float16 or float32) scale and zero per group.
      const double bytes4 =
          weights / 2 + calls * static_cast<double>(N * (K / 128)) * (q4[0].scale16.defined() ? 3 : 5);
      std::printf(
          "M=%4lld int4 %7.2f ms %6.1f GB/s %6.1f GFLOP/s | int8 %7.2f ms %6.1f GB/s %6.1f GFLOP/s | %.2fx | "
          "panels: int4 %6.1f int8 %6.1f GFLOP/s\n",
          static_cast<long long>(M), t4 * 1e3, bytes4 / t4 / 1e9, flops / t4 / 1e9, t8 * 1e3, weights / t8 / 1e9,
          flops / t8 / 1e9, t8 / t4, flops / tp / 1e9, flops / tp8 / 1e9);
    }
  }
}

}  // namespace
}  // namespace ropeserve
