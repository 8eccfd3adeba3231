// The device half of the sampler against the host sampler, its oracle, on
// random logits (no model): every row DeviceSampling draws (processor edits,
// penalties, the argmax, top logprobs) gives the token, logprob and top
// logprobs the host sampler gives on the whole row, step after step, with
// requests coming and going (rows reused, tensors grown), and the rows it
// must leave to the host (random draws on the CPU, opaque processors,
// penalized drafts) are left.
#include "server/sampler/device_sampling.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <random>
#include <set>

#include "server/models/device.h"
#include "server/sampler/logits_processors.h"
#include "tests/engine/mask_processor.h"
#include "tests/sampler/step_plans.h"

namespace ropeserve {
namespace {

constexpr std::int64_t kVocab = 50;  // not a multiple of 32: the bitmask's last word is partial

// Forbids the request's last token (state that follows `generated`, as a
// grammar's), stated as a forbid-list edit.
class NoRepeat : public LogitsProcessor {
 public:
  void Process(std::span<const TokenId> generated, std::span<float> logits) override {
    if (!generated.empty())
      logits[static_cast<std::size_t>(generated.back())] = -std::numeric_limits<float>::infinity();
  }
  bool Describable() const override { return true; }
  void Describe(std::span<const TokenId> generated, LogitsEdit& edit) override {
    edit = LogitsEdit{};
    if (generated.empty()) return;
    auto ids = std::make_shared<std::vector<TokenId>>(1, generated.back());
    edit.masked = true;
    edit.allow_list = false;
    edit.ids = *ids;
    edit.keep = ids;
  }
};

class Opaque : public LogitsProcessor {
 public:
  void Process(std::span<const TokenId>, std::span<float> logits) override { logits[3] += 1.0f; }
};

SamplingSpec Spec(RequestId id, std::vector<TokenId> prompt = {3, 4, 5, 3}) {
  SamplingSpec s;
  s.id = id;
  s.seed = 1000 + id;
  s.prompt = std::move(prompt);
  return s;
}

// Logits that favour a few tokens in every step (so that penalties and
// masks change the argmax), with noise.
at::Tensor StepLogits(std::int64_t rows, std::mt19937_64& rng) {
  std::normal_distribution<float> noise(0.f, 0.6f);
  at::Tensor t = at::empty({rows, kVocab}, at::kFloat);
  float* p = t.data_ptr<float>();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t v = 0; v < kVocab; ++v)
      p[r * kVocab + v] = (v < 8 ? 4.0f - 0.5f * static_cast<float>(v) : 0.f) + noise(rng);
  return t;
}

using testing::OneRowEach;

// Runs `plan` on both paths and expects the same tokens; returns the host's.
struct Both {
  explicit Both(at::Device d = at::Device(at::kCPU)) : device(kVocab, d), on(d) {}
  HostSampler host, device_side;
  DeviceSampling device;
  at::Device on;
  std::map<RequestId, std::vector<TokenId>> tokens;
  std::size_t drawn_rows = 0;

  void Run(const StepPlan& plan, const at::Tensor& logits, const std::vector<char>& want_drawn = {}) {
    host.Apply(plan);
    device_side.Apply(plan);
    device.Apply(plan);
    auto draws = device.Draw(device_side, plan, logits.to(on), /*random=*/false);
    ASSERT_TRUE(draws.ok()) << draws.status().ToString();
    draws->token = draws->token.cpu();
    if (draws->top_logits.defined()) {
      draws->top_logits = draws->top_logits.cpu();
      draws->top_ids = draws->top_ids.cpu();
    }
    if (!want_drawn.empty()) {
      EXPECT_EQ(draws->drawn, want_drawn);
    }
    const at::Tensor lse = at::logsumexp(logits, 1);
    std::int64_t row = 0;
    for (const auto& s : plan.sequences) {
      for (std::int64_t i = 0; i < s.logits_rows(); ++i, ++row) {
        const std::span<const float> r(logits[row].data_ptr<float>(), kVocab);
        const double l = lse[row].item<float>();
        auto want = host.Sample(s.request_id, r, l);
        ASSERT_TRUE(want.ok()) << want.status().ToString();
        StatusOr<SampledToken> got = Internal("unset");
        if (draws->drawn[static_cast<std::size_t>(row)]) {
          ++drawn_rows;
          const auto token = static_cast<TokenId>(draws->token[row].item<std::int64_t>());
          std::vector<std::pair<TokenId, float>> top;
          if (draws->top_logits.defined())
            for (std::int64_t k = 0; k < draws->top_logits.size(1); ++k)
              top.emplace_back(static_cast<TokenId>(draws->top_ids[row][k].item<std::int64_t>()),
                               draws->top_logits[row][k].item<float>());
          got = device_side.TakeReduced(s.request_id, token, r[static_cast<std::size_t>(token)], l, top);
        } else {
          got = device_side.Sample(s.request_id, r, l);
        }
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        EXPECT_EQ(got->token, want->token) << "request " << s.request_id << " token " << tokens[s.request_id].size();
        EXPECT_EQ(got->logprob, want->logprob);
        EXPECT_EQ(got->top, want->top);
        tokens[s.request_id].push_back(want->token);
      }
    }
  }
};

void ExpectProcessedGreedyRowsEqualTheHostSampler(at::Device on) {
  std::vector<SamplingSpec> specs;
  for (RequestId id = 1; id <= 8; ++id) specs.push_back(Spec(id));
  specs[1].params.repetition_penalty = 1.8;  // 2
  specs[2].params.frequency_penalty = 0.7;   // 3
  specs[2].params.presence_penalty = 0.4;
  specs[3].params.repetition_penalty = 0.9;  // 4: below 1 favours repeats
  specs[3].params.frequency_penalty = -0.3;
  specs[3].params.presence_penalty = 1.1;
  specs[3].top_logprobs = 3;
  specs[3].processor = std::make_shared<ProcessorChain>(std::vector<std::shared_ptr<LogitsProcessor>>{
      std::make_shared<LogitBias>(std::vector<std::pair<std::int64_t, float>>{{0, -2.f}, {9, 3.5f}, {49, 1.f}}),
      std::make_shared<NoRepeat>()});
  specs[4].processor = testing::MaskProcessor::EvenOnly(/*as_allow_list=*/true, kVocab + 10);  // 5
  specs[4].params.presence_penalty = 0.5;
  specs[5].params.temperature = 0.8;                // 6: random, the host's on the CPU
  specs[6].processor = std::make_shared<Opaque>();  // 7: the host's
  specs[7].top_logprobs = 5;                        // 8
  Both both(on);
  std::mt19937_64 rng(7);
  std::vector<RequestId> live = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<char> drawn = {1, 1, 1, 1, 1, 0, 0, 1};
  both.Run(OneRowEach(live, specs), StepLogits(8, rng), drawn);
  for (int step = 1; step < 10; ++step) both.Run(OneRowEach(live), StepLogits(8, rng), drawn);
  // Request 3 leaves; 9 (penalties) takes its rows, which must start clean.
  SamplingSpec nine = Spec(9, {0, 1, 2});
  nine.params.repetition_penalty = 2.0;
  nine.params.frequency_penalty = 1.0;
  live = {1, 2, 4, 5, 6, 7, 8, 9};
  for (int step = 0; step < 10; ++step)
    both.Run(OneRowEach(live, step == 0 ? std::vector<SamplingSpec>{nine} : std::vector<SamplingSpec>{},
                        step == 0 ? std::vector<RequestId>{3} : std::vector<RequestId>{}),
             StepLogits(8, rng));
  EXPECT_EQ(both.drawn_rows, 10u * 6 + 10u * 6);
  // The processing mattered: the plain greedy request keeps to the favoured
  // tokens, the penalized ones move off them.
  EXPECT_LE(std::set<TokenId>(both.tokens[1].begin(), both.tokens[1].end()).size(), 3u);
  for (RequestId id : {2u, 3u, 9u})
    EXPECT_GE(std::set<TokenId>(both.tokens[id].begin(), both.tokens[id].end()).size(), 4u) << id;
  for (TokenId t : both.tokens[5]) EXPECT_EQ(t % 2, 0);
  for (std::size_t k = 1; k < both.tokens[4].size(); ++k) EXPECT_NE(both.tokens[4][k], both.tokens[4][k - 1]);
}

TEST(DeviceSampling, ProcessedGreedyRowsEqualTheHostSampler) { ExpectProcessedGreedyRowsEqualTheHostSampler(at::kCPU); }

TEST(DeviceSampling, CudaProcessedGreedyRowsEqualTheHostSampler) {
  if (!CheckDeviceUsable(at::Device("cuda:0")).ok()) GTEST_SKIP() << "no CUDA GPU visible";
  ExpectProcessedGreedyRowsEqualTheHostSampler(at::Device("cuda:0"));
}

// Random draws on a GPU: within each row's mask, and a function of (seed,
// offset) alone: two samplers given the same rows in other batches draw
// the same tokens.
TEST(DeviceSampling, CudaRandomDrawsKeepMasksAndDependOnSeedAndOffsetOnly) {
  if (!CheckDeviceUsable(at::Device("cuda:0")).ok()) GTEST_SKIP() << "no CUDA GPU visible";
  const at::Device cuda("cuda:0");
  std::vector<SamplingSpec> specs;
  for (RequestId id = 1; id <= 6; ++id) {
    specs.push_back(Spec(id));
    specs.back().params.temperature = 1.5;
    specs.back().params.presence_penalty = 0.5;
    specs.back().processor = testing::MaskProcessor::EvenOnly(/*as_allow_list=*/true, kVocab + 10);
  }
  specs[1].params.top_k = 3;
  specs[2].params.top_p = 0.5;
  HostSampler a, b;
  DeviceSampling da(kVocab, cuda), db(kVocab, cuda);
  const StepPlan all = OneRowEach({1, 2, 3, 4, 5, 6}, specs);
  const StepPlan some = OneRowEach({5, 3, 1}, specs);  // other rows, other order
  a.Apply(all);
  b.Apply(some);
  da.Apply(all);
  db.Apply(some);
  std::mt19937_64 rng(5);
  const at::Tensor logits = StepLogits(6, rng);
  auto x = da.Draw(a, all, logits.to(cuda), true);
  auto y = db.Draw(b, some, logits.index_select(0, at::tensor({4, 2, 0}, at::kLong)).to(cuda), true);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(x->drawn, std::vector<char>(6, 1));
  const at::Tensor tx = x->token.cpu(), ty = y->token.cpu();
  for (std::int64_t r = 0; r < 6; ++r) EXPECT_EQ(tx[r].item<std::int64_t>() % 2, 0) << r;
  EXPECT_EQ(ty[0].item<std::int64_t>(), tx[4].item<std::int64_t>());
  EXPECT_EQ(ty[1].item<std::int64_t>(), tx[2].item<std::int64_t>());
  EXPECT_EQ(ty[2].item<std::int64_t>(), tx[0].item<std::int64_t>());
}

TEST(DeviceSampling, ManyRequestsGrowTheTensors) {
  std::vector<SamplingSpec> specs;
  std::vector<RequestId> live;
  for (RequestId id = 1; id <= 90; ++id) {
    specs.push_back(Spec(id, {static_cast<TokenId>(id % kVocab)}));
    if (id % 3 == 0) specs.back().params.repetition_penalty = 1.5 + 0.01 * static_cast<double>(id);
    if (id % 5 == 0) specs.back().params.frequency_penalty = 0.5;
    live.push_back(id);
  }
  Both both;
  std::mt19937_64 rng(11);
  both.Run(OneRowEach(live, specs), StepLogits(90, rng));
  for (int step = 0; step < 4; ++step) both.Run(OneRowEach(live), StepLogits(90, rng));
  EXPECT_GE(both.device.parameter_rows(), 90);
  EXPECT_GE(both.device.penalty_rows(), 30 + 18 - 6);
  EXPECT_EQ(both.drawn_rows, 5u * 90);
}

// Draft rows: a plain request's are drawn (as a non-speculative step would
// draw each); a penalized one's go to the host (its penalties would count
// drafts not yet accepted).
TEST(DeviceSampling, DraftRowsAreDrawnOnlyWhenPlain) {
  SamplingSpec plain = Spec(1), penalized = Spec(2);
  penalized.params.presence_penalty = 1.0;
  StepPlan plan = OneRowEach({1, 2}, {plain, penalized});
  for (auto& s : plan.sequences) {
    s.token_ids = {1, 7, 8};
    s.num_draft = 2;
  }
  HostSampler sampler;
  sampler.Apply(plan);
  DeviceSampling device(kVocab, at::Device(at::kCPU));
  device.Apply(plan);
  std::mt19937_64 rng(3);
  const at::Tensor logits = StepLogits(6, rng);
  auto draws = device.Draw(sampler, plan, logits, false);
  ASSERT_TRUE(draws.ok());
  EXPECT_EQ(draws->drawn, (std::vector<char>{1, 1, 1, 0, 0, 0}));
  const at::Tensor argmax = logits.argmax(1);
  for (std::int64_t r = 0; r < 3; ++r) EXPECT_EQ(draws->token[r].item<std::int64_t>(), argmax[r].item<std::int64_t>());
  // The wrong shape is an error, not a crash.
  EXPECT_FALSE(device.Draw(sampler, plan, at::zeros({6, kVocab + 1}), false).ok());
}

}  // namespace
}  // namespace ropeserve
