// bench/workload.cc's static-batching plan: the baseline `ropeserve bench
// --baseline static` runs. It once credited each request's whole output
// while capping the steps at the engine's per-request length limit, so a
// batch padded to a long prompt "produced" tokens it never ran.
#include <gtest/gtest.h>

#include "bench/workload.h"

namespace ropeserve::bench {
namespace {

Workload Make(const std::vector<std::size_t>& prompt_lens, const std::vector<std::int64_t>& outs) {
  Workload w;
  for (std::size_t n : prompt_lens) w.prompts.emplace_back(n, TokenId{1});
  w.output_lens = outs;
  return w;
}

TEST(StaticPlan, PadsToTheLongestPromptAndRunsToTheLongestOutput) {
  const StaticPlan p = PlanStaticBatches(Make({3, 5, 2}, {4, 1, 7}), 2, 100);
  ASSERT_EQ(p.batches.size(), 2u);
  EXPECT_EQ(p.batches[0].begin, 0u);
  EXPECT_EQ(p.batches[0].end, 2u);
  EXPECT_EQ(p.batches[0].pad_to, 5);
  EXPECT_EQ(p.batches[0].steps, 4);
  EXPECT_EQ(p.batches[1].begin, 2u);
  EXPECT_EQ(p.batches[1].end, 3u);
  EXPECT_EQ(p.batches[1].pad_to, 2);
  EXPECT_EQ(p.batches[1].steps, 7);
  EXPECT_EQ(p.tokens_per_sequence, 9);  // 5 + 4 and 2 + 7
  EXPECT_EQ(p.useful, 12);
}

TEST(StaticPlan, PaddingLongerThanOneRequestStillRunsEveryOutput) {
  // Each request fits 10 tokens; padded, the batch needs 9 + 9.
  const StaticPlan p = PlanStaticBatches(Make({9, 1}, {1, 9}), 2, 4096);
  EXPECT_EQ(p.tokens_per_sequence, 18);
  EXPECT_EQ(p.batches[0].steps, 9);
  EXPECT_EQ(p.useful, 10);
}

TEST(StaticPlan, ThePositionLimitCutsStepsAndOnlyProducedTokensCount) {
  const StaticPlan p = PlanStaticBatches(Make({3, 5, 2}, {4, 1, 7}), 2, 8);
  EXPECT_EQ(p.tokens_per_sequence, 8);
  EXPECT_EQ(p.batches[0].steps, 3);
  EXPECT_EQ(p.batches[1].steps, 6);
  EXPECT_EQ(p.useful, 3 + 1 + 6);
}

TEST(StaticPlan, EmptyWorkload) {
  const StaticPlan p = PlanStaticBatches(Workload{}, 4, 100);
  EXPECT_TRUE(p.batches.empty());
  EXPECT_EQ(p.useful, 0);
}

}  // namespace
}  // namespace ropeserve::bench
