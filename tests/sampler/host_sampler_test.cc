// HostSampler and SampleStep: the per-request sampling state the runner
// keeps across steps, driven by StepPlan added/removed diffs.
#include "server/sampler/host_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "server/sampler/step_sampling.h"

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

TEST(SampleStep, OneTokenPerSequenceNeedingLogitsInPlanOrder) {
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
  auto out = SampleStep(s, plan, logits);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->tokens.size(), 2u);
  EXPECT_EQ(out->tokens[0].id, 1u);
  EXPECT_EQ(out->tokens[0].token, 1);
  EXPECT_EQ(out->tokens[1].id, 3u);
  EXPECT_EQ(out->tokens[1].token, 0);

  logits.rows = 1;  // a forward that returned too few rows
  auto bad = SampleStep(s, plan, logits);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInternal);
}

// A processor that cannot state its effect as an edit.
class Opaque : public LogitsProcessor {
 public:
  void Process(std::span<const TokenId>, std::span<float> logits) override { logits[0] = 0; }
};

TEST(HostSampler, OnlyPlainGreedyRequestsDoWithoutTheirRow) {
  HostSampler s;
  StepPlan plan;
  plan.added = {Spec(1), Spec(2), Spec(3), Spec(4), Spec(5), Spec(6)};
  plan.added[1].params.temperature = 0.7;
  plan.added[2].params.presence_penalty = 0.5;
  plan.added[3].top_logprobs = 2;
  plan.added[4].params.repetition_penalty = 1.1;
  plan.added[5].processor = std::make_shared<Opaque>();
  s.Apply(plan);
  EXPECT_FALSE(s.NeedsRow(1));
  for (RequestId id : {2u, 3u, 4u, 5u, 6u}) EXPECT_TRUE(s.NeedsRow(id)) << id;
  EXPECT_TRUE(s.NeedsRow(99));                   // unknown: Sample reports it
  auto refused = s.TakeReduced(6, 0, 1.0, 1.0);  // an opaque processor: the host's alone
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kInternal);
  auto no_top = s.TakeReduced(4, 0, 1.0, 1.0);  // asked for top logprobs, none came back
  ASSERT_FALSE(no_top.ok());
  EXPECT_EQ(no_top.status().code(), ErrorCode::kInternal);
}

// What a device may draw: everything but rows of a processor that cannot
// describe its effect; a draw's offset counts the request's tokens,
// whoever sampled them, and `generated` is what its processor and
// penalties read.
TEST(HostSampler, DeviceDrawsCarryTheirParametersSeedAndTokenCount) {
  HostSampler s;
  StepPlan plan;
  plan.added = {Spec(1), Spec(2), Spec(3), Spec(4), Spec(5)};
  plan.added[1].params.temperature = 0.7;
  plan.added[1].params.top_k = 40;
  plan.added[1].params.top_p = 0.9;
  plan.added[1].params.min_p = 0.05;
  plan.added[1].seed = 1234;
  plan.added[2].params.temperature = 0.7;
  plan.added[2].params.frequency_penalty = 0.5;
  plan.added[2].params.repetition_penalty = 1.2;
  plan.added[3].params.temperature = 0.7;
  plan.added[3].top_logprobs = 1;
  plan.added[4].processor = std::make_shared<Opaque>();
  s.Apply(plan);
  const auto greedy = s.DeviceDrawOf(1);
  ASSERT_TRUE(greedy.has_value());
  EXPECT_EQ(greedy->params.temperature, 0.0);
  EXPECT_TRUE(greedy->plain());
  const auto random = s.DeviceDrawOf(2);
  ASSERT_TRUE(random.has_value());
  EXPECT_EQ(random->params.temperature, 0.7);
  EXPECT_EQ(random->params.top_k, 40);
  EXPECT_EQ(random->params.top_p, 0.9);
  EXPECT_EQ(random->params.min_p, 0.05);
  EXPECT_EQ(random->seed, 1234u);
  EXPECT_EQ(random->offset, 0u);
  EXPECT_TRUE(random->plain());
  const auto penalized = s.DeviceDrawOf(3);
  ASSERT_TRUE(penalized.has_value());
  EXPECT_EQ(penalized->params.frequency_penalty, 0.5);
  EXPECT_EQ(penalized->params.repetition_penalty, 1.2);
  EXPECT_FALSE(penalized->plain());
  ASSERT_TRUE(s.DeviceDrawOf(4).has_value());
  EXPECT_EQ(s.DeviceDrawOf(4)->top_logprobs, 1u);
  EXPECT_FALSE(s.DeviceDrawOf(5).has_value());
  EXPECT_FALSE(s.DeviceDrawOf(99).has_value());
  // A drawn token: logprob = its logit - lse; the next draw's offset is 1,
  // and 2 after a host sample of the same request.
  auto t = s.TakeReduced(2, 7, 1.5, 2.0);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->token, 7);
  EXPECT_EQ(t->logprob, -0.5);
  EXPECT_EQ(s.DeviceDrawOf(2)->offset, 1u);
  ASSERT_TRUE(s.Sample(2, std::vector<float>{0.0f, 1.0f, 2.0f}, std::nullopt).ok());
  EXPECT_EQ(s.DeviceDrawOf(2)->offset, 2u);
  EXPECT_EQ(std::vector<TokenId>(s.DeviceDrawOf(2)->generated.begin(), s.DeviceDrawOf(2)->generated.end()).front(), 7);
}

// A token the device drew after penalties counts for the host's next
// penalized sample of the same request, as one the host drew.
TEST(HostSampler, TakeReducedCountsPenalizedTokensAndReportsTopLogprobs) {
  SamplingSpec spec = Spec(1);
  spec.params.presence_penalty = 2.0;
  spec.top_logprobs = 2;
  HostSampler host, device;
  host.Apply(Adding(spec));
  device.Apply(Adding(spec));
  const std::vector<float> row{3.0f, 2.5f, 2.5f, 0.0f};
  const double lse = LogSumExp(row);
  auto a = host.Sample(1, row, lse);
  // The top candidates come back in any order, ties too.
  const std::vector<std::pair<TokenId, float>> top{{2, 2.5f}, {0, 3.0f}, {1, 2.5f}};
  auto b = device.TakeReduced(1, 0, 3.0, lse, top);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->token, 0);
  EXPECT_EQ(b->token, a->token);
  EXPECT_EQ(b->logprob, a->logprob);
  EXPECT_EQ(b->top, a->top);  // 0, then 1 (the lower id of the tie)
  // Now token 0 is penalized by 2 on both: the next greedy pick is 1.
  auto a2 = host.Sample(1, row, lse);
  auto b2 = device.Sample(1, row, lse);
  ASSERT_TRUE(a2.ok() && b2.ok());
  EXPECT_EQ(a2->token, 1);
  EXPECT_EQ(b2->token, 1);
}

TEST(HostSampler, TakeReducedArgmaxGivesWhatSampleGivesOnTheWholeRow) {
  // Ties go to the lowest id on both paths (the reduction's argmax is the
  // first maximal index, as at::max's).
  for (const std::vector<float>& row : std::vector<std::vector<float>>{
           {0.5f, 3.0f, -1.0f, 3.0f}, {-2.0f, -2.0f}, {7.0f}, {1e-3f, -4.0f, 2.5f, 2.5f, 0.0f}}) {
    HostSampler whole, reduced;
    whole.Apply(Adding(Spec(1)));
    reduced.Apply(Adding(Spec(1)));
    const auto best = std::max_element(row.begin(), row.end());  // the first maximal one
    const int argmax = static_cast<int>(best - row.begin());
    double m = *best, sum = 0;
    for (float v : row) sum += std::exp(v - m);
    const double lse = m + std::log(sum);
    auto a = whole.Sample(1, row, lse);
    auto b = reduced.TakeReduced(1, argmax, *best, lse);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->token, argmax);
    EXPECT_EQ(b->token, a->token);
    EXPECT_EQ(b->logprob, a->logprob);
    EXPECT_NEAR(b->logprob, LogSoftmax(row, argmax), 1e-12);
  }
}

TEST(SampleStep, RowsLeftOutAreSampledFromTheirReduction) {
  HostSampler s;
  StepPlan plan;
  plan.added = {Spec(1), Spec(2), Spec(3)};
  plan.added[1].params.temperature = 1.0;  // needs its row
  plan.added[1].seed = 5;
  s.Apply(plan);
  for (RequestId id : {1u, 2u, 3u}) {
    ScheduledSequence q;
    q.request_id = id;
    q.token_ids = {0};
    q.needs_logits = true;
    plan.sequences.push_back(q);
  }
  // Row 1 (request 2) alone comes back whole; rows 0 and 2 as reductions.
  std::vector<float> data{-50, -50, 10};
  std::vector<std::int64_t> index{-1, 0, -1}, argmax{1, 2, 0};
  std::vector<float> max{4.0f, 10.0f, 2.0f}, lse{4.5f, 10.0f, 3.0f};
  StepLogits logits;
  logits.data = data.data();
  logits.rows = 3;
  logits.vocab = 3;
  logits.row_index = index.data();
  logits.argmax = argmax.data();
  logits.max = max.data();
  logits.logsumexp = lse.data();
  auto out = SampleStep(s, plan, logits);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->tokens.size(), 3u);
  EXPECT_EQ(out->tokens[0].token, 1);
  EXPECT_DOUBLE_EQ(out->tokens[0].logprob, 4.0 - 4.5);
  EXPECT_EQ(out->tokens[1].token, 2);  // sampled from its row: all the mass on id 2
  EXPECT_EQ(out->tokens[2].token, 0);
  EXPECT_DOUBLE_EQ(out->tokens[2].logprob, 2.0 - 3.0);

  argmax[2] = 3;  // outside the vocabulary
  auto bad = SampleStep(s, plan, logits);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInternal);
  argmax[2] = 0;
  logits.max = nullptr;  // a row left out without its reduction
  bad = SampleStep(s, plan, logits);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInternal);
}

}  // namespace
}  // namespace ropeserve
