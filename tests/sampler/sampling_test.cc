#include "server/sampler/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace ropeserve {
namespace {

TEST(Sampling, GreedyPicksArgmaxLowestIdOnTies) {
  std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f};
  SamplerRng rng(1);
  EXPECT_EQ(SampleToken(logits, SamplingParams{}, rng), 1);
}

TEST(Sampling, SeedMakesSamplingReproducible) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = static_cast<float>(std::sin(i));
  SamplingParams p;
  p.temperature = 1.0;
  SamplerRng a(42), b(42);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(SampleToken(logits, p, a), SampleToken(logits, p, b));
}

TEST(Sampling, FrequenciesFollowSoftmaxOverTemperature) {
  std::vector<float> logits{0.0f, 1.0f, 2.0f};
  SamplingParams p;
  p.temperature = 2.0;
  SamplerRng rng(3);
  std::map<std::int64_t, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[SampleToken(logits, p, rng)]++;
  const double z = 1 + std::exp(0.5) + std::exp(1.0);
  EXPECT_NEAR(counts[0] / double(n), 1 / z, 0.015);
  EXPECT_NEAR(counts[2] / double(n), std::exp(1.0) / z, 0.015);
}

TEST(Sampling, TopKTopPAndMinPRestrictTheCandidates) {
  std::vector<float> logits{3.0f, 2.9f, 0.0f, -5.0f};
  SamplerRng rng(5);
  SamplingParams k1;
  k1.temperature = 1.0;
  k1.top_k = 1;
  SamplingParams p_small;
  p_small.temperature = 1.0;
  p_small.top_p = 0.3;  // the top token alone has ~0.5 of the mass
  SamplingParams minp;
  minp.temperature = 1.0;
  minp.min_p = 0.5;  // token 1 (0.9x of top) stays, 2 and 3 go
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(SampleToken(logits, k1, rng), 0);
    EXPECT_EQ(SampleToken(logits, p_small, rng), 0);
    EXPECT_LE(SampleToken(logits, minp, rng), 1);
  }
}

TEST(Sampling, ValidateNamesTheField) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_NE(p.Validate().message().find("top_p"), std::string::npos);
  p = SamplingParams{};
  p.temperature = -1;
  EXPECT_NE(p.Validate().message().find("temperature"), std::string::npos);
  p = SamplingParams{};
  p.min_p = 2;
  EXPECT_FALSE(p.Validate().ok());
}

TEST(Sampling, TopLogprobsAreNormalisedAndOrdered) {
  std::vector<float> logits{1.0f, 3.0f, 2.0f, 3.0f};
  auto top = TopLogprobs(logits, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 1);
  EXPECT_EQ(top[1].first, 3);
  EXPECT_EQ(top[2].first, 2);
  double total = 0;
  for (float x : logits) total += std::exp(LogprobOf(logits, &x - logits.data()));
  EXPECT_NEAR(total, 1.0, 1e-12);
  EXPECT_NEAR(top[0].second, LogprobOf(logits, 1), 1e-15);
}

}  // namespace
}  // namespace ropeserve

namespace ropeserve {
namespace {

TEST(Sampling, PenaltiesFollowVllmSemantics) {
  std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.5f};
  PenaltyState st;
  st.prompt_tokens = {0, 1};
  st.output_counts = {{2, 3}, {0, 1}};
  SamplingParams p;
  p.repetition_penalty = 2.0;  // positive logits divided, negative multiplied; prompt or output
  ApplyPenalties(l, p, st);
  EXPECT_EQ(l, (std::vector<float>{1.0f, -4.0f, 0.5f, 0.5f}));
  l = {2.0f, -2.0f, 1.0f, 0.5f};
  p = SamplingParams{};
  p.frequency_penalty = 0.5;  // output counts only, prompt ignored
  p.presence_penalty = 0.25;
  ApplyPenalties(l, p, st);
  EXPECT_EQ(l, (std::vector<float>{2.0f - 0.75f, -2.0f, 1.0f - 1.75f, 0.5f}));
  p = SamplingParams{};
  EXPECT_FALSE(p.has_penalties());
  p.repetition_penalty = 0;
  EXPECT_NE(p.Validate().message().find("repetition_penalty"), std::string::npos);
  p = SamplingParams{};
  p.frequency_penalty = 2.5;
  EXPECT_NE(p.Validate().message().find("frequency_penalty"), std::string::npos);
  p = SamplingParams{};
  p.presence_penalty = -3;
  EXPECT_NE(p.Validate().message().find("presence_penalty"), std::string::npos);
}

}  // namespace
}  // namespace ropeserve
