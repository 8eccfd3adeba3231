// SummarizeLogits (the sampler's max, argmax and logsumexp a row) against
// float64 arithmetic on the same rows, and against LibTorch's ops: row
// lengths with and without vector tails up to a real vocabulary, ties,
// infinities and NaN.
#include "server/sampler/logits_summary.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_features.h"
#include "tests/common/float_bounds.h"

namespace ropeserve {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The kernel's documented bound (logits_summary.h): exponentials within 2
// ulp, summed exactly enough in float64, one rounding of the result.
double LseBound(double lse) { return 6 * testing::kF32Roundoff + std::abs(lse) * testing::kF32Roundoff; }

struct Exact {
  double lse, max;
  std::int64_t argmax;
};

Exact Oracle(const at::Tensor& row) {
  const at::Tensor r = row.to(at::kDouble).contiguous();
  const double* p = r.data_ptr<double>();
  Exact e{0, -INFINITY, 0};
  for (std::int64_t i = 0; i < r.numel(); ++i)
    if (p[i] > e.max) e.max = p[i], e.argmax = i;
  double sum = 0;
  for (std::int64_t i = 0; i < r.numel(); ++i) sum += std::exp(p[i] - e.max);
  e.lse = e.max + std::log(sum);
  return e;
}

TEST(LogitsSummary, MatchesFloat64AndLibTorchOnRandomRows) {
  at::manual_seed(7);
  for (std::int64_t n : {1, 7, 16, 17, 100, 4099, 151936}) {
    at::Tensor x = at::randn({3, n}) * 5;
    if (n > 20) {  // the max twice in row 1 (lanes apart) and in row 2 (one lane): the lower id wins
      x[1][n - 3] = 40.0f;
      x[1][n / 2] = 40.0f;
      x[2][5] = 40.0f;
      x[2][5 + 16] = 40.0f;
    }
    const LogitsSummary got = SummarizeLogits(x);
    const LogitsSummary ref = SummarizeLogitsReference(x);
    for (std::int64_t r = 0; r < 3; ++r) {
      SCOPED_TRACE("n=" + std::to_string(n) + " row=" + std::to_string(r));
      const Exact e = Oracle(x[r]);
      EXPECT_EQ(got.max[r].item<float>(), static_cast<float>(e.max));
      EXPECT_EQ(got.argmax[r].item<std::int64_t>(), e.argmax);
      EXPECT_EQ(got.argmax[r].item<std::int64_t>(), ref.argmax[r].item<std::int64_t>());
      EXPECT_NEAR(got.logsumexp[r].item<float>(), e.lse, LseBound(e.lse));
    }
    if (n > 20) {
      EXPECT_EQ(got.argmax[1].item<std::int64_t>(), n / 2);
      EXPECT_EQ(got.argmax[2].item<std::int64_t>(), 5);
    }
  }
}

TEST(LogitsSummary, EachRowAsAloneWhateverTheBatch) {
  const at::Tensor x = at::randn({9, 1000}) * 3;
  const LogitsSummary all = SummarizeLogits(x);
  for (std::int64_t r = 0; r < 9; ++r) {
    const LogitsSummary one = SummarizeLogits(x.narrow(0, r, 1));
    EXPECT_EQ(one.logsumexp[0].item<float>(), all.logsumexp[r].item<float>());
    EXPECT_EQ(one.argmax[0].item<std::int64_t>(), all.argmax[r].item<std::int64_t>());
  }
}

TEST(LogitsSummary, InfinitiesAndNanAsLibTorch) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::int64_t n = 37;
  at::Tensor x = at::full({5, n}, -kInf);  // row 0: all -inf
  x[1][20] = 2.0f;                         // row 1: one finite entry among -inf
  x[2] = at::randn({n});
  x[2][30] = kInf;  // row 2: +inf
  x[3] = at::randn({n});
  x[3][33] = nan;  // row 3: NaN after finite values
  x[3][35] = nan;
  x[4] = at::randn({n});
  x[4][1] = kInf;
  x[4][5] = nan;  // row 4: +inf, then NaN
  const LogitsSummary got = SummarizeLogits(x);
  const LogitsSummary ref = SummarizeLogitsReference(x);
  for (std::int64_t r = 0; r < 5; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const float gm = got.max[r].item<float>(), rm = ref.max[r].item<float>();
    const float gl = got.logsumexp[r].item<float>(), rl = ref.logsumexp[r].item<float>();
    EXPECT_TRUE(gm == rm || (std::isnan(gm) && std::isnan(rm))) << gm << " vs " << rm;
    EXPECT_TRUE(gl == rl || (std::isnan(gl) && std::isnan(rl))) << gl << " vs " << rl;
    EXPECT_EQ(got.argmax[r].item<std::int64_t>(), ref.argmax[r].item<std::int64_t>());
  }
  EXPECT_EQ(got.logsumexp[1].item<float>(), 2.0f);
  EXPECT_EQ(got.argmax[3].item<std::int64_t>(), 33);
}

}  // namespace
}  // namespace ropeserve
