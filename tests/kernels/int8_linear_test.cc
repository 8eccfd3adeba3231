// The int8-weight linear (kernels/cpu/int8_linear.h) against float64
// maths on the dequantized weights, with bounds derived from its
// arithmetic: the activations' int16 rounding (half a level per element),
// float32 sums and, for bfloat16 outputs, one final rounding.
#include "kernels/cpu/int8_linear.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "kernels/cpu/packed_linear.h"
#include "tests/kernels/linear_bound.h"

namespace ropeserve {
namespace {

struct Case {
  std::int64_t M, K, N;
  bool bias;
  at::ScalarType dtype;
};

// |kernel - exact| for every output element: the activation rounding
// (|x - xq * sx| <= sx / 2 per element, weighted by |w|), float32
// accumulation and scaling (relative 1e-5 of sum |x||w|), the float32 bias
// add (relative 2^-23 of |y| + |b|; 1e-6 allowed), and the output's own
// rounding in bfloat16 (half a unit: 2^-9 relative; 2^-8 allowed).
at::Tensor Bound(const at::Tensor& x64, const at::Tensor& w64, const at::Tensor& b64, const at::Tensor& exact,
                 at::ScalarType out) {
  const at::Tensor sx = x64.abs().amax(1) / cpu::kInt8ActivationLevels;
  const at::Tensor quant = 0.5 * 1.001 * sx.unsqueeze(1) * w64.abs().sum(1).unsqueeze(0);
  const at::Tensor accum = 1e-5 * at::matmul(x64.abs(), w64.abs().t());
  const at::Tensor add = 1e-6 * (exact.abs() + (b64.defined() ? b64.abs().unsqueeze(0) : at::zeros_like(exact)));
  const at::Tensor round = out == at::kBFloat16 ? exact.abs() / 256.0 : at::zeros_like(exact);
  return quant + accum + add + round + 1e-30;
}

class Int8Linear : public ::testing::TestWithParam<Case> {};

TEST_P(Int8Linear, KernelMatchesExactMathsWithinTheQuantizationBound) {
  const Case c = GetParam();
  at::manual_seed(c.M * 131 + c.K * 7 + c.N);
  const at::Tensor x = at::randn({c.M, c.K}).to(c.dtype);
  const cpu::Int8Weight w = cpu::QuantizeInt8(at::randn({c.N, c.K}) * 0.05);
  const at::Tensor b = c.bias ? at::randn({c.N}).to(c.dtype) : at::Tensor();
  ASSERT_TRUE(cpu::Int8KernelSupports(x, w)) << "every ISA has a variant";
  const at::Tensor got = cpu::Int8LinearKernel(x, w, b);
  ASSERT_EQ(got.scalar_type(), c.dtype);
  ASSERT_EQ(got.sizes(), (std::vector<std::int64_t>{c.M, c.N}));
  const at::Tensor x64 = x.to(at::kDouble), w64 = cpu::DequantizeInt8(w, at::kDouble);
  at::Tensor exact = at::matmul(x64, w64.t());
  if (c.bias) exact = exact + b.to(at::kDouble);
  const at::Tensor bound = Bound(x64, w64, c.bias ? b.to(at::kDouble) : at::Tensor(), exact, c.dtype);
  const at::Tensor err = (got.to(at::kDouble) - exact).abs();
  EXPECT_TRUE((err <= bound).all().item<bool>()) << "worst excess " << (err - bound).max().item<double>();
  // The bound is far below the outputs' size: a wrong row, column or scale
  // would exceed it.
  EXPECT_LT(bound.max().item<double>(), 0.02 * exact.abs().max().item<double>() + 1e-6);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Int8Linear,
    ::testing::Values(Case{1, 896, 896, false, at::kBFloat16}, Case{1, 896, 128, true, at::kBFloat16},
                      Case{1, 4864, 896, false, at::kBFloat16}, Case{2, 896, 4864, false, at::kFloat},
                      Case{3, 64, 130, true, at::kFloat}, Case{4, 17, 5, false, at::kBFloat16},
                      Case{5, 33, 9, true, at::kBFloat16}, Case{8, 896, 1003, false, at::kFloat},
                      Case{7, 100, 1, true, at::kBFloat16}, Case{1, 31, 3, false, at::kFloat},
                      Case{1, 1, 7, true, at::kFloat}, Case{9, 96, 33, true, at::kBFloat16},
                      Case{16, 896, 4864, false, at::kBFloat16}, Case{17, 65, 40, false, at::kFloat},
                      // several float32 flushes of the int32 sums (8192 columns each)
                      Case{2, 8192 * 2 + 40, 19, true, at::kBFloat16}, Case{1, 8192, 5, false, at::kFloat},
                      Case{33, 70, 40, true, at::kBFloat16}, Case{64, 896, 128, false, at::kBFloat16}),
    [](const auto& info) {
      const Case& c = info.param;
      return "M" + std::to_string(c.M) + "_K" + std::to_string(c.K) + "_N" + std::to_string(c.N) +
             (c.bias ? "_bias" : "") + (c.dtype == at::kBFloat16 ? "_bf16" : "_f32");
    });

// The panel kernel (bfloat16 x, int8 panels widened to bfloat16): the
// products x * q are exact in float32 (8 + 7 significant bits), so the
// error is K float32 additions and the scale and bias (one fused multiply-
// add: two more roundings allowed), each at most 2^-24 of a partial sum
// bounded by |x| |w| + |b|, then one bfloat16 rounding of the output (2^-9
// of |y|; 2^-8 allowed for the sums' error carried through).
struct PanelCase {
  std::int64_t M, K, N;
  bool bias;
};
class Int8Panel : public ::testing::TestWithParam<PanelCase> {};

TEST_P(Int8Panel, MatchesExactMathsWithinFloat32SumsAndOneRounding) {
  const PanelCase c = GetParam();
  at::manual_seed(c.M * 131 + c.K * 7 + c.N);
  const at::Tensor x = at::randn({c.M, c.K}).to(at::kBFloat16);
  at::Tensor wf = at::randn({c.N, c.K}) * 0.05;
  if (c.N > 3) wf[2].zero_();  // a zero row: scale 0
  const cpu::Int8Weight w = cpu::QuantizeInt8(wf);
  const at::Tensor b = c.bias ? at::randn({c.N}).to(at::kBFloat16) : at::Tensor();
  ASSERT_TRUE(cpu::Int8PanelSupports(x, w)) << "every ISA has a variant";
  const at::Tensor got = cpu::Int8PanelLinear(x, w, b);
  ASSERT_EQ(got.scalar_type(), at::kBFloat16);
  ASSERT_EQ(got.sizes(), (std::vector<std::int64_t>{c.M, c.N}));
  const auto [exact, bound] =
      testing::ExactBf16Linear(x.to(at::kDouble), cpu::DequantizeInt8(w, at::kDouble), b, c.K + 2);
  const at::Tensor err = (got.to(at::kDouble) - exact).abs();
  EXPECT_TRUE((err <= bound).all().item<bool>()) << "worst excess " << (err - bound).max().item<double>();
  EXPECT_LT(bound.max().item<double>(), 0.01 * exact.abs().max().item<double>() + 1e-6);
  // Int8Linear sends rows past the VNNI kernel's limit here.
  if (c.M > cpu::Int8KernelMaxRows()) {
    const at::Tensor via = cpu::Int8Linear(x, w, b);
    EXPECT_TRUE(at::equal(via, got));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Int8Panel,
    ::testing::Values(PanelCase{1, 896, 1152, true}, PanelCase{17, 896, 4864, false}, PanelCase{32, 4864, 896, false},
                      PanelCase{33, 70, 40, true}, PanelCase{5, 33, 9, true}, PanelCase{7, 64, 130, true},
                      PanelCase{2, 17, 5, false}, PanelCase{3, 31, 3, false}, PanelCase{1, 1, 7, true},
                      PanelCase{6, 2, 65, false}, PanelCase{64, 896, 129, true}, PanelCase{100, 257, 200, false},
                      PanelCase{300, 896, 1003, true}, PanelCase{19, 4867, 63, true}, PanelCase{24, 32, 16, false}),
    [](const auto& info) {
      const PanelCase& c = info.param;
      return "M" + std::to_string(c.M) + "_K" + std::to_string(c.K) + "_N" + std::to_string(c.N) +
             (c.bias ? "_bias" : "");
    });

TEST(Int8Quantize, RowsKeepTheirScaleAndZeroRowsStayZero) {
  at::manual_seed(5);
  at::Tensor w = at::randn({6, 37});
  w[2].zero_();
  const cpu::Int8Weight q = cpu::QuantizeInt8(w.to(at::kBFloat16));
  ASSERT_EQ(q.q.scalar_type(), at::kChar);
  EXPECT_LE(q.q.abs().max().item<int>(), 127);
  EXPECT_EQ(q.scale[2].item<float>(), 0.0f);
  EXPECT_EQ(q.q[2].abs().sum().item<int>(), 0);
  for (std::int64_t n = 0; n < 6; ++n)
    if (n != 2) {
      EXPECT_EQ(q.q[n].abs().max().item<int>(), 127);  // the row's largest weight
    }
  // Every weight within half a step of its row's scale.
  const at::Tensor wb = w.to(at::kBFloat16).to(at::kFloat);
  const at::Tensor err = (cpu::DequantizeInt8(q, at::kFloat) - wb).abs();
  EXPECT_TRUE((err <= q.scale.unsqueeze(1) * 0.5001 + 1e-12).all().item<bool>());
  // The vectorized dequantization (bf16: rounded to nearest even once) is
  // the plain ATen one.
  const at::Tensor plain = q.q.to(at::kFloat) * q.scale.unsqueeze(1);
  EXPECT_TRUE(at::equal(cpu::DequantizeInt8(q, at::kFloat), plain));
  EXPECT_TRUE(at::equal(cpu::DequantizeInt8(q, at::kBFloat16), plain.to(at::kBFloat16)));
  // Rows (the tied embedding's lookup) are the dequantized rows.
  const at::Tensor ids = at::tensor(std::vector<std::int64_t>{4, 0, 4}, at::kLong);
  EXPECT_TRUE(at::equal(cpu::Int8Rows(q, ids, at::kFloat), cpu::DequantizeInt8(q, at::kFloat).index_select(0, ids)));
}

TEST(Int8Linear, ManyRowsDequantizeForAtLinear) {
  at::manual_seed(9);
  const at::Tensor x = at::randn({cpu::kInt8KernelMaxRows + 3, 40});  // 65539 rows
  const cpu::Int8Weight w = cpu::QuantizeInt8(at::randn({12, 40}));
  const at::Tensor b = at::randn({12});
  EXPECT_FALSE(cpu::Int8KernelSupports(x, w));
  const at::Tensor got = cpu::Int8Linear(x, w, b);
  const at::Tensor want = at::linear(x, cpu::DequantizeInt8(w, at::kFloat), b);
  EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5));
  // Other dtypes are not the kernel's.
  EXPECT_FALSE(cpu::Int8KernelSupports(at::randn({1, 40}).to(at::kDouble), w));
  EXPECT_FALSE(cpu::Int8KernelSupports(at::randn({1, 41}), w));  // K differs
}

// Not a test: prints the int8 kernel's weight-read bandwidth beside the
// bf16 GEMM's (packed; else at::linear), and the kernel and the
// panel kernel against dequantize + at::linear
// at a few row counts (run with --gtest_also_run_disabled_tests).
TEST(Int8LinearSpeed, DISABLED_PrintBandwidth) {
  const at::Tensor wf = at::randn({4864, 896}) * 0.05;
  std::vector<cpu::Int8Weight> q;
  std::vector<at::Tensor> bf;
  for (int i = 0; i < 48; ++i) {  // 48 matrices: far beyond the caches
    q.push_back(cpu::QuantizeInt8(wf + i * 1e-3));
    bf.push_back((wf + i * 1e-3).to(at::kBFloat16));
  }
  std::vector<cpu::PackedWeight> packed;  // the bf16 model's layout
  for (const auto& w : bf) packed.push_back(cpu::PackWeight(w));
  for (std::int64_t M : {1, 4, 8, 16, 32, 64, 128, 512}) {
    const at::Tensor x = at::randn({M, 896}).to(at::kBFloat16);
    auto time = [&](auto&& fn) {
      double best = 1e9;
      for (int rep = 0; rep < 3; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 48; ++i) fn(i);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      return best;
    };
    const double t_int8 = time([&](int i) { cpu::Int8LinearKernel(x, q[i], at::Tensor()); });
    const double t_deq = time([&](int i) { at::linear(x, cpu::DequantizeInt8(q[i], at::kBFloat16)); });
    const double t_panel =
        cpu::Int8PanelSupports(x, q[0]) ? time([&](int i) { cpu::Int8PanelLinear(x, q[i], at::Tensor()); }) : 1e9;
    const double t_bf16 = time([&](int i) { cpu::PackedLinear(x, packed[i], at::Tensor()); });
    const double weights = 48.0 * 4864 * 896, flops = 2.0 * weights * M;
    std::printf(
        "M=%3lld int8 kernel %6.1f GB/s %6.1f GFLOP/s | int8 panels %6.1f GFLOP/s | dequant+at::linear %6.1f GFLOP/s "
        "| bf16 %6.1f GB/s %6.1f GFLOP/s\n",
        static_cast<long long>(M), weights / t_int8 / 1e9, flops / t_int8 / 1e9, flops / t_panel / 1e9,
        flops / t_deq / 1e9, 2 * weights / t_bf16 / 1e9, flops / t_bf16 / 1e9);
  }
}

}  // namespace
}  // namespace ropeserve
