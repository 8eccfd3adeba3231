// The runner's Sampler without a model: a step's logits tensors in, its
// tokens out. Its rows reduced where they lie must give what the host
// sampler gives on the whole rows (SampleStep, the oracle), for every kind
// of request at once, with DeviceSampling (kDevice) or without it (kHost);
// the forward's rows are checked against the plan (an error, never a read
// past them); prompt rows give prompt logprobs.
#include "server/sampler/sampler.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "server/models/device.h"
#include "server/sampler/host_sampler.h"
#include "server/sampler/logits_summary.h"
#include "server/sampler/step_sampling.h"
#include "tests/common/float_bounds.h"
#include "tests/sampler/step_plans.h"

namespace ropeserve {
namespace {

constexpr std::int64_t kVocab = 40;
// How far a logprob from a reduced row may be from the oracle's: the row
// kernel's logsumexp is within 3 * 2^-23 + |lse| * 2^-24 of the exact one
// (kernels/cpu/logits_summary.h), rounded to float32 once more (|lse| *
// 2^-24), and the oracle's float64 sum adds nothing at this scale; these
// rows' |lse| stays below 16 (40 logits under ~8).
const double kLogprobBound = 3 * testing::kF32Roundoff * 2 + 2 * 16 * testing::kF32Roundoff;

SamplingSpec Greedy(RequestId id, std::size_t top_logprobs = 0) {
  SamplingSpec s;
  s.id = id;
  s.top_logprobs = top_logprobs;
  return s;
}

SamplingSpec Random(RequestId id) {
  SamplingSpec s = Greedy(id);
  s.params.temperature = 0.8;
  s.params.top_p = 0.9;
  s.seed = 77 + id;
  return s;
}

SamplingSpec Penalized(RequestId id) {
  SamplingSpec s = Greedy(id);
  s.params.presence_penalty = 1.5;
  s.params.repetition_penalty = 1.3;
  s.prompt = {1, 2, 3};
  return s;
}

using testing::OneRowEach;

// A few tokens favoured (so that penalties move the argmax), with noise.
at::Tensor Logits(std::int64_t rows, std::mt19937_64& rng) {
  std::normal_distribution<float> noise(0.f, 0.7f);
  at::Tensor t = at::empty({rows, kVocab}, at::kFloat);
  float* p = t.data_ptr<float>();
  for (std::int64_t i = 0; i < rows * kVocab; ++i) p[i] = (i % kVocab < 6 ? 3.0f : 0.f) + noise(rng);
  return t;
}

// The oracle: the host sampler on the whole rows.
StatusOr<StepOutput> Oracle(HostSampler& host, const StepPlan& plan, const at::Tensor& logits) {
  host.Apply(plan);
  StepLogits rows;
  rows.data = logits.data_ptr<float>();
  rows.rows = logits.size(0);
  rows.vocab = kVocab;
  return SampleStep(host, plan, rows);
}

void ExpectSame(const StepOutput& got, const StepOutput& want, double bound = kLogprobBound) {
  ASSERT_EQ(got.tokens.size(), want.tokens.size());
  for (std::size_t i = 0; i < got.tokens.size(); ++i) {
    EXPECT_EQ(got.tokens[i].id, want.tokens[i].id);
    EXPECT_EQ(got.tokens[i].token, want.tokens[i].token) << "row " << i;
    EXPECT_NEAR(got.tokens[i].logprob, want.tokens[i].logprob, bound) << "row " << i;
    ASSERT_EQ(got.tokens[i].top.size(), want.tokens[i].top.size());
    for (std::size_t k = 0; k < got.tokens[i].top.size(); ++k) {
      EXPECT_EQ(got.tokens[i].top[k].first, want.tokens[i].top[k].first);
      EXPECT_NEAR(got.tokens[i].top[k].second, want.tokens[i].top[k].second, bound);
    }
  }
}

void ExpectEqualsTheHostSampler(SamplerPlacement placement, at::Device on = at::Device(at::kCPU),
                                double bound = kLogprobBound) {
  Sampler sampler(kVocab, on, placement);
  HostSampler oracle;
  std::mt19937_64 rng(5);
  const std::vector<RequestId> live = {1, 2, 3, 4};
  for (int step = 0; step < 12; ++step) {
    const StepPlan plan =
        step == 0 ? OneRowEach(live, {Greedy(1), Greedy(2, 3), Random(3), Penalized(4)}) : OneRowEach(live);
    const at::Tensor logits = Logits(static_cast<std::int64_t>(live.size()), rng);
    sampler.Apply(plan);
    auto got = sampler.Sample(plan, logits.to(on), at::Tensor());
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    auto want = Oracle(oracle, plan, logits);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    ExpectSame(*got, *want, bound);
  }
}

TEST(Sampler, HostPlacementEqualsTheHostSamplerOnWholeRows) { ExpectEqualsTheHostSampler(SamplerPlacement::kHost); }

TEST(Sampler, DevicePlacementEqualsTheHostSamplerOnWholeRows) { ExpectEqualsTheHostSampler(SamplerPlacement::kDevice); }

// On a GPU, placed on the host: the row summary is the CUDA kernel
// (__expf and block sums: within 2^-16 (1 + |lse|) of the exact logsumexp,
// CudaLogitsSummary; |lse| < 16 here) and a step's numbers come back in
// its one packed copy (LogitsSummary::packed). (Placed on the device, the
// random row would be a GPU draw, which the host oracle cannot give:
// DeviceSampling's own tests cover that placement.)
TEST(Sampler, CudaHostPlacementEqualsTheHostSampler) {
  if (!CheckDeviceUsable(at::Device("cuda:0")).ok()) GTEST_SKIP() << "no CUDA GPU visible";
  ExpectEqualsTheHostSampler(SamplerPlacement::kHost, at::Device("cuda:0"), 17 * std::ldexp(1.0, -16) + kLogprobBound);
}

// What a CUDA graph of a padded step hands the Sampler (ReducedRows): the
// summary of all its rows and the host copy of its packed form
// (LogitsSummary::packed's layout for all those rows: the bits of
// logsumexp, max, max, then the argmax as int32); `waits` counts the
// Sampler's waits for that copy.
struct ForwardReduction {
  ForwardReduction(const at::Tensor& padded, int& waits)
      : summary(SummarizeLogits(padded)),
        packed(at::cat({summary.logsumexp.view(at::kInt), summary.max.view(at::kInt), summary.max.view(at::kInt),
                        summary.argmax.to(at::kInt)})),
        reduced{summary, packed.data_ptr<std::int32_t>(), padded.size(0), [&waits] { ++waits; }} {}
  LogitsSummary summary;
  at::Tensor packed;
  ReducedRows reduced;
};

// A step whose rows the forward already reduced (ReducedRows: what a CUDA
// graph of a padded decode step ends with) gives what the Sampler's own
// reduction gives: the plan's rows come first among `rows` (fillers after,
// with other values, so reading a quarter of the packed copy at the wrong
// stride changes the logprobs), greedy steps read the host copy after one
// wait, steps drawn on the device use the summary's argmax and max on the
// device; a reduction of fewer rows than the step's is an error.
TEST(Sampler, RowsReducedWithTheForwardGiveWhatItsOwnReductionGives) {
  for (SamplerPlacement placement : {SamplerPlacement::kHost, SamplerPlacement::kDevice}) {
    SCOPED_TRACE(placement == SamplerPlacement::kHost ? "host" : "device");
    Sampler sampler(kVocab, at::Device(at::kCPU), placement);
    HostSampler oracle;
    std::mt19937_64 rng(15);
    const std::vector<RequestId> live = {1, 2, 3, 4};
    const auto n = static_cast<std::int64_t>(live.size());
    constexpr std::int64_t kPadded = 7;
    int waits = 0;
    // One step of `plan`'s rows, first among kPadded, against the oracle.
    auto step_with = [&](const StepPlan& plan) {
      const auto rows = static_cast<std::int64_t>(plan.sequences.size());
      const at::Tensor padded = Logits(kPadded, rng);
      const ForwardReduction forward(padded, waits);
      sampler.Apply(plan);
      auto got = sampler.Sample(plan, padded.narrow(0, 0, rows), at::Tensor(), &forward.reduced);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      auto want = Oracle(oracle, plan, padded.narrow(0, 0, rows).contiguous());
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      ExpectSame(*got, *want);
    };
    for (int step = 0; step < 12; ++step)
      step_with(step == 0 ? OneRowEach(live, {Greedy(1), Greedy(2, 3), Random(3), Penalized(4)}) : OneRowEach(live));
    // On the host every step reads the copy; on the device every step has
    // rows drawn there, whose numbers come back by their own copy.
    const bool host = placement == SamplerPlacement::kHost;
    EXPECT_EQ(sampler.stats().reduced_with_forward, host ? 12u : 0u);
    EXPECT_EQ(waits, host ? 12 : 0);
    // Plain greedy rows alone (the decode steps of most servers' traffic):
    // the copy on either placement, nothing drawn.
    const std::uint64_t draws = sampler.stats().device_draws;
    const std::vector<RequestId> greedy = {5, 6};
    for (int step = 0; step < 3; ++step)
      step_with(step == 0 ? OneRowEach(greedy, {Greedy(5), Greedy(6)}) : OneRowEach(greedy));
    EXPECT_EQ(sampler.stats().reduced_with_forward, host ? 15u : 3u);
    EXPECT_EQ(sampler.stats().device_draws, draws);

    const StepPlan plan = OneRowEach(live);
    const at::Tensor three = Logits(3, rng);
    const LogitsSummary summary = SummarizeLogits(three);
    std::vector<std::int32_t> copy(12);
    const ReducedRows fewer{summary, copy.data(), 3, [] {}};
    sampler.Apply(plan);
    EXPECT_FALSE(sampler.Sample(plan, Logits(n, rng), at::Tensor(), &fewer).ok());
  }
}

TEST(Sampler, DrawsOnTheDeviceOnlyWhenPlacedThere) {
  std::mt19937_64 rng(9);
  for (SamplerPlacement placement : {SamplerPlacement::kAuto, SamplerPlacement::kHost, SamplerPlacement::kDevice}) {
    Sampler sampler(kVocab, at::Device(at::kCPU), placement);
    const StepPlan plan = OneRowEach({1, 2}, {Greedy(1), Penalized(2)});
    sampler.Apply(plan);
    ASSERT_TRUE(sampler.Sample(plan, Logits(2, rng), at::Tensor()).ok());
    // On the CPU, kAuto is the host sampler; kDevice draws the greedy rows
    // (the penalized one too: penalties are part of the device's edit).
    const bool device = placement == SamplerPlacement::kDevice;
    EXPECT_EQ(sampler.device_sampling() != nullptr, device);
    EXPECT_EQ(sampler.stats().device_draws, device ? 2u : 0u);
    // A step of plain greedy rows alone draws nothing anywhere: the
    // summary's argmax is each row's token.
    const StepPlan plain = OneRowEach({3, 4}, {Greedy(3), Greedy(4)});
    sampler.Apply(plain);
    const at::Tensor logits = Logits(2, rng);
    auto out = sampler.Sample(plain, logits, at::Tensor());
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(sampler.stats().device_draws, device ? 2u : 0u);
    const at::Tensor argmax = logits.argmax(1);
    for (std::int64_t r = 0; r < 2; ++r)
      EXPECT_EQ(out->tokens[static_cast<std::size_t>(r)].token, argmax[r].item<std::int64_t>());
  }
}

TEST(Sampler, RowsThatDoNotMatchThePlanAreAnError) {
  std::mt19937_64 rng(3);
  Sampler sampler(kVocab, at::Device(at::kCPU), SamplerPlacement::kHost);
  const StepPlan plan = OneRowEach({1, 2}, {Greedy(1), Greedy(2)});
  sampler.Apply(plan);
  EXPECT_FALSE(sampler.Sample(plan, Logits(1, rng), at::Tensor()).ok());              // a row short
  EXPECT_FALSE(sampler.Sample(plan, Logits(3, rng), at::Tensor()).ok());              // a row too many
  EXPECT_FALSE(sampler.Sample(plan, at::Tensor(), at::Tensor()).ok());                // none at all
  EXPECT_FALSE(sampler.Sample(plan, at::zeros({2, kVocab + 1}), at::Tensor()).ok());  // wrong vocabulary
  EXPECT_TRUE(sampler.Sample(plan, Logits(2, rng), at::Tensor()).ok());
}

TEST(Sampler, PromptRowsGivePromptLogprobs) {
  std::mt19937_64 rng(4);
  Sampler sampler(kVocab, at::Device(at::kCPU), SamplerPlacement::kHost);
  StepPlan plan;
  plan.added = {Greedy(1)};
  ScheduledSequence s;
  s.request_id = 1;
  s.token_ids = {5, 6, 7};
  s.prompt_logprobs_from = 1;
  s.prompt_logprob_targets = {6, 7};
  s.prompt_top_logprobs = 2;
  plan.sequences.push_back(s);  // a prefill chunk: no sampled token
  sampler.Apply(plan);
  const at::Tensor prompt = Logits(2, rng);
  auto out = sampler.Sample(plan, at::Tensor(), prompt);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(out->tokens.empty());
  ASSERT_EQ(out->prompt.size(), 1u);
  ASSERT_EQ(out->prompt[0].tokens.size(), 2u);
  EXPECT_EQ(out->prompt[0].first_position, 1);
  for (int i = 0; i < 2; ++i) {
    const TokenId target = s.prompt_logprob_targets[static_cast<std::size_t>(i)];
    const double want = prompt[i][target].item<double>() - at::logsumexp(prompt[i].to(at::kDouble), 0).item<double>();
    EXPECT_EQ(out->prompt[0].tokens[static_cast<std::size_t>(i)].id, target);
    // Both sum the same float32 row in float64, in different orders: within
    // 2 * vocab float64 roundings of |lse| < 16.
    EXPECT_NEAR(out->prompt[0].tokens[static_cast<std::size_t>(i)].logprob, want, 2 * kVocab * 0x1p-53 * 16);
    EXPECT_EQ(out->prompt[0].tokens[static_cast<std::size_t>(i)].top_logprobs.size(), 2u);
  }
  // Fewer prompt rows than targets: an error.
  EXPECT_FALSE(sampler.Sample(plan, at::Tensor(), prompt.narrow(0, 0, 1)).ok());
}

}  // namespace
}  // namespace ropeserve
