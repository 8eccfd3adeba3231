// HostSampler and SampleRows: the per-request sampling state the runner
// keeps across steps, driven by StepPlan added/removed diffs.
#include "server/engine/host_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "server/engine/model_executor.h"

namespace ropeserve {
namespace {

StepPlan Adding(SamplingSpec spec) {
  StepPlan plan;
  plan.added.push_back(std::move(spec));
  return plan;
}

SamplingSpec Spec(RequestId id) {
  SamplingSpec s;
  s.id = id;
  return s;
}

// log_softmax(row)[token], computed directly in double.
double LogSoftmax(const std::vector<float>& row, int token) {
  double m = -std::numeric_limits<double>::infinity();
  for (float v : row) m = std::max(m, static_cast<double>(v));
  double sum = 0;
  for (float v : row) sum += std::exp(v - m);
  return row[token] - m - std::log(sum);
}

TEST(HostSampler, UnknownRequestIsAnInternalError) {
  HostSampler s;
  std::vector<float> row{1, 2};
  auto r = s.Sample(7, row, std::nullopt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInternal);
}

TEST(HostSampler, GreedyReportsLogprobAndSortedTopAlternatives) {
  HostSampler s;
  SamplingSpec spec = Spec(1);
  spec.top_logprobs = 3;
  s.Apply(Adding(spec));
  std::vector<float> row{0.5f, 3.0f, -1.0f, 2.0f, 1.0f};
  auto t = s.Sample(1, row, std::nullopt);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->id, 1u);
  EXPECT_EQ(t->token, 1);
  // Same formula in double on five values: a few ulps of double.
  EXPECT_NEAR(t->logprob, LogSoftmax(row, 1), 1e-12);
  ASSERT_EQ(t->top.size(), 3u);
  EXPECT_EQ(t->top[0].first, 1);
  EXPECT_EQ(t->top[1].first, 3);
  EXPECT_EQ(t->top[2].first, 4);
  EXPECT_GE(t->top[0].second, t->top[1].second);
  EXPECT_GE(t->top[1].second, t->top[2].second);
}

TEST(HostSampler, SuppliedLogSumExpIsUsed) {
  HostSampler s;
  s.Apply(Adding(Spec(1)));
  std::vector<float> row{0, 1};
  auto t = s.Sample(1, row, 10.0);  // deliberately not the row's
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t->logprob, 1.0 - 10.0);
}

// Masks every token but the one after the last generated (cyclically), and
// records what it saw.
class CountingProcessor : public LogitsProcessor {
 public:
  void Process(std::span<const TokenId> generated, std::span<float> logits) override {
    seen.emplace_back(generated.begin(), generated.end());
    const TokenId want = generated.empty() ? 0 : (generated.back() + 1) % static_cast<TokenId>(logits.size());
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (static_cast<TokenId>(i) != want) logits[i] = -std::numeric_limits<float>::infinity();
  }
  std::vector<std::vector<TokenId>> seen;
};

TEST(HostSampler, ProcessorSeesGeneratedTokensAndLogprobsStayRaw) {
  HostSampler s;
  auto proc = std::make_shared<CountingProcessor>();
  SamplingSpec spec = Spec(4);
  spec.processor = proc;
  s.Apply(Adding(spec));
  std::vector<float> row{0.0f, 0.0f, 5.0f};  // argmax 2, masked away
  std::vector<TokenId> got;
  for (int i = 0; i < 4; ++i) {
    auto t = s.Sample(4, row, std::nullopt);
    ASSERT_TRUE(t.ok());
    got.push_back(t->token);
    EXPECT_NEAR(t->logprob, LogSoftmax(row, t->token), 1e-12);
  }
  EXPECT_EQ(got, (std::vector<TokenId>{0, 1, 2, 0}));
  ASSERT_EQ(proc->seen.size(), 4u);
  EXPECT_TRUE(proc->seen[0].empty());
  EXPECT_EQ(proc->seen[3], (std::vector<TokenId>{0, 1, 2}));
  // The caller's row is untouched.
  EXPECT_EQ(row, (std::vector<float>{0.0f, 0.0f, 5.0f}));
}

TEST(HostSampler, SameSeedSameTokensAndRemovedDropsState) {
  std::vector<float> row(40);
  for (int i = 0; i < 40; ++i) row[i] = static_cast<float>(std::sin(i * 0.7));
  SamplingSpec spec = Spec(9);
  spec.params.temperature = 1.0;
  spec.seed = 1234;
  HostSampler a, b;
  a.Apply(Adding(spec));
  b.Apply(Adding(spec));
  int greedy = 0;
  for (int i = 1; i < 40; ++i)
    if (row[i] > row[greedy]) greedy = i;
  bool any_differs_from_greedy = false;
  for (int i = 0; i < 30; ++i) {
    auto x = a.Sample(9, row, std::nullopt), y = b.Sample(9, row, std::nullopt);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(x->token, y->token);
    any_differs_from_greedy |= x->token != greedy;
  }
  EXPECT_TRUE(any_differs_from_greedy);
  StepPlan rm;
  rm.removed.push_back(9);
  a.Apply(rm);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_FALSE(a.Sample(9, row, std::nullopt).ok());
}

TEST(HostSampler, RepetitionPenaltyLooksAtThePrompt) {
  std::vector<float> row{1.0f, 2.0f, 1.9f};
  HostSampler plain, penalized;
  plain.Apply(Adding(Spec(1)));
  SamplingSpec spec = Spec(1);
  spec.params.repetition_penalty = 2.0;  // 2.0 -> 1.0 for prompt tokens
  spec.prompt = {1};
  penalized.Apply(Adding(spec));
  EXPECT_EQ(plain.Sample(1, row, std::nullopt)->token, 1);
  EXPECT_EQ(penalized.Sample(1, row, std::nullopt)->token, 2);
}

TEST(SampleRows, OneTokenPerSequenceNeedingLogitsInPlanOrder) {
  HostSampler s;
  StepPlan plan;
  plan.added = {Spec(1), Spec(2), Spec(3)};
  s.Apply(plan);
  for (RequestId id : {1u, 2u, 3u}) {
    ScheduledSequence q;
    q.request_id = id;
    q.token_ids = {0};
    q.needs_logits = id != 2;  // a prefill chunk in the middle
    plan.sequences.push_back(q);
  }
  std::vector<float> data{0, 9, 0, /* row for 3 */ 9, 0, 0};
  StepLogits logits;
  logits.data = data.data();
  logits.rows = 2;
  logits.vocab = 3;
  auto out = SampleRows(s, plan, logits);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->tokens.size(), 2u);
  EXPECT_EQ(out->tokens[0].id, 1u);
  EXPECT_EQ(out->tokens[0].token, 1);
  EXPECT_EQ(out->tokens[1].id, 3u);
  EXPECT_EQ(out->tokens[1].token, 0);

  logits.rows = 1;  // a forward that returned too few rows
  auto bad = SampleRows(s, plan, logits);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInternal);
}

}  // namespace
}  // namespace ropeserve
