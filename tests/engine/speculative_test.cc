// Prompt-lookup speculative decoding without a model: the n-gram proposer
// (vLLM's ngram semantics), the scheduler's drafts (limits, budget, no
// preemption for them, rollback of rejected ones) and the engine's
// verification: outputs equal to a non-speculative run, greedy and seeded
// sampling, with logits processors, stop ids and max_tokens.
#include "server/engine/speculative.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "server/engine/engine.h"
#include "server/engine/scheduler.h"
#include "tests/engine/one_hot_logits.h"

namespace ropeserve {
namespace {

SpeculativeConfig Ngram(int k, int min_n, int max_n) {
  SpeculativeConfig c;
  c.num_tokens = k;
  c.min_ngram = min_n;
  c.max_ngram = max_n;
  c.disable_by_batch_size = 0;  // batches of any size speculate here
  return c;
}

using Ids = std::vector<TokenId>;

TEST(ProposeNgram, TheTokensAfterTheLongestEarlierMatchOfTheSuffix) {
  // vLLM's example: [4 2 3] has no earlier match, [2 3] has; three tokens follow it.
  EXPECT_EQ(ProposeNgram(Ids{1, 2, 3, 4, 2, 3}, Ngram(4, 2, 3), 4), (Ids{4, 2, 3}));
  // The 3-gram [7 8 9] wins over the 2-gram [8 9] that occurs earlier.
  EXPECT_EQ(ProposeNgram(Ids{8, 9, 5, 7, 8, 9, 6, 1, 7, 8, 9}, Ngram(2, 2, 3), 2), (Ids{6, 1}));
  // Among equally long matches, the earliest.
  EXPECT_EQ(ProposeNgram(Ids{1, 2, 10, 1, 2, 20, 1, 2}, Ngram(1, 2, 2), 1), (Ids{10}));
  // Capped by the config and by the caller.
  EXPECT_EQ(ProposeNgram(Ids{1, 2, 3, 4, 5, 6, 1, 2}, Ngram(2, 2, 2), 8), (Ids{3, 4}));
  EXPECT_EQ(ProposeNgram(Ids{1, 2, 3, 4, 5, 6, 1, 2}, Ngram(8, 2, 2), 3), (Ids{3, 4, 5}));
  EXPECT_TRUE(ProposeNgram(Ids{1, 2, 3, 4, 5, 6, 1, 2}, Ngram(8, 2, 2), 0).empty());
}

TEST(ProposeNgram, NothingWithoutAMatchOfAtLeastTheMinimum) {
  EXPECT_TRUE(ProposeNgram(Ids{1, 2, 3, 4}, Ngram(4, 1, 3), 4).empty());
  EXPECT_TRUE(ProposeNgram(Ids{1, 2, 3, 9, 3}, Ngram(4, 2, 3), 4).empty());  // only a 1-gram repeats
  EXPECT_EQ(ProposeNgram(Ids{1, 2, 3, 9, 3}, Ngram(4, 1, 3), 4), (Ids{9, 3}));
  EXPECT_TRUE(ProposeNgram(Ids{}, Ngram(4, 1, 3), 4).empty());
  EXPECT_TRUE(ProposeNgram(Ids{5}, Ngram(4, 1, 3), 4).empty());
  // The suffix itself is no match: [5 5] matches at 0 only when a token follows.
  EXPECT_EQ(ProposeNgram(Ids{5, 5, 5}, Ngram(4, 1, 2), 4), (Ids{5}));
}

TEST(SpeculativeConfig, ValidatesItsRanges) {
  EXPECT_TRUE(Ngram(0, 2, 4).Validate().ok());
  EXPECT_TRUE(Ngram(kMaxSpeculativeTokens, 1, 1).Validate().ok());
  EXPECT_FALSE(Ngram(kMaxSpeculativeTokens + 1, 1, 1).Validate().ok());
  EXPECT_FALSE(Ngram(-1, 1, 1).Validate().ok());
  EXPECT_FALSE(Ngram(4, 0, 2).Validate().ok());
  EXPECT_FALSE(Ngram(4, 3, 2).Validate().ok());
}

RequestSpec Spec(RequestId id, Ids prompt, std::int64_t max_tokens) {
  RequestSpec s;
  s.id = id;
  s.prompt = std::move(prompt);
  s.max_tokens = max_tokens;
  return s;
}

SchedulerConfig Speculating(int k) {
  SchedulerConfig c;
  c.max_model_len = 64;
  c.speculative = Ngram(k, 1, 3);
  return c;
}

TEST(SpeculativeScheduler, ADecodeCarriesDraftsWithinItsLimits) {
  BlockPool pool(32, 4);
  SchedulerConfig c = Speculating(4);
  c.max_num_batched_tokens = 64;
  Scheduler s(c, pool);
  ASSERT_TRUE(s.Add(Spec(1, {1, 2, 3, 4, 5, 6, 1, 2}, 4)).ok());
  StepPlan prefill = s.Schedule();
  ASSERT_EQ(prefill.sequences.size(), 1u);
  EXPECT_EQ(prefill.sequences[0].num_draft, 0);  // a prefill never speculates
  s.Update(prefill, {{1, {3}}});                 // tokens ... 1 2 3: [1 2 3] matched at 0
  StepPlan decode = s.Schedule();
  ASSERT_EQ(decode.sequences.size(), 1u);
  const ScheduledSequence& d = decode.sequences[0];
  // max_tokens 4, one generated: at most 3 more tokens, so 2 drafts count.
  EXPECT_EQ(d.token_ids, (Ids{3, 4, 5}));
  EXPECT_EQ(d.num_draft, 2);
  EXPECT_EQ(d.logits_rows(), 3);
  EXPECT_EQ(d.drafts().size(), 2u);
  EXPECT_EQ(d.start_position, 8);
  EXPECT_EQ(decode.num_tokens(), 3);
  // One draft accepted (4), the second rejected (7 instead of 5).
  s.Update(decode, {{1, {4, 7}}});
  const Request& r = *s.Find(1);
  EXPECT_EQ(r.tokens, (Ids{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 7}));
  EXPECT_EQ(r.num_computed, 10);  // through the accepted 4; 7 is next to compute
}

TEST(SpeculativeScheduler, DraftsFitTheBudgetTheContextAndTheRequestsChoice) {
  {
    BlockPool pool(32, 4);
    SchedulerConfig c = Speculating(4);
    c.max_num_batched_tokens = 3;  // room for the token and 2 drafts
    Scheduler s(c, pool);
    ASSERT_TRUE(s.Add(Spec(1, {1, 2, 3, 4, 5, 6, 7, 1, 2}, 10)).ok());
    s.Update(s.Schedule(), {});  // the prompt in chunks of 3
    s.Update(s.Schedule(), {});
    StepPlan last_chunk = s.Schedule();
    s.Update(last_chunk, {{1, {3}}});
    StepPlan d = s.Schedule();
    EXPECT_EQ(d.sequences[0].num_draft, 2);
  }
  {
    BlockPool pool(32, 4);
    SchedulerConfig c = Speculating(4);
    c.max_model_len = 11;  // 10 tokens known: one more slot of K/V
    Scheduler s(c, pool);
    ASSERT_TRUE(s.Add(Spec(1, {1, 2, 3, 4, 5, 6, 7, 1, 2}, 2)).ok());
    s.Update(s.Schedule(), {{1, {3}}});
    EXPECT_EQ(s.Schedule().sequences[0].num_draft, 0);  // max_tokens 2: the last token needs no draft
  }
  {
    BlockPool pool(32, 4);
    Scheduler s(Speculating(4), pool);
    RequestSpec spec = Spec(1, {1, 2, 3, 4, 5, 6, 7, 1, 2}, 10);
    spec.speculative = false;
    ASSERT_TRUE(s.Add(spec).ok());
    s.Update(s.Schedule(), {{1, {3}}});
    EXPECT_EQ(s.Schedule().sequences[0].num_draft, 0);
  }
}

TEST(SpeculativeScheduler, DraftsNeverPreemptAndTakeNoBlockThatIsNotFree) {
  BlockPool pool(3, 4);  // 12 slots
  Scheduler s(Speculating(4), pool);
  ASSERT_TRUE(s.Add(Spec(1, {1, 2, 3, 4, 5, 6, 1, 2}, 4)).ok());  // two blocks
  ASSERT_TRUE(s.Add(Spec(2, {9, 9, 9}, 1)).ok());                 // the third
  StepPlan p = s.Schedule();
  ASSERT_EQ(p.sequences.size(), 2u);
  s.Update(p, {{1, {3}}, {2, {9}}});
  s.Finish(2, FinishReason::kLength);
  ASSERT_EQ(pool.num_free(), 1);
  // Request 1 has 9 tokens: its decode at position 8 and 2 drafts need the
  // third block, which is free now.
  StepPlan d = s.Schedule();
  EXPECT_EQ(d.sequences[0].num_draft, 2);
  EXPECT_EQ(s.num_preemptions(), 0u);
}

TEST(SpeculativeScheduler, NoProposalsWhileMoreRequestsRunThanTheLimit) {
  BlockPool pool(64, 4);
  SchedulerConfig c = Speculating(4);
  c.speculative.disable_by_batch_size = 2;
  Scheduler s(c, pool);
  for (RequestId id : {1, 2, 3}) ASSERT_TRUE(s.Add(Spec(id, {1, 2, 3, 4, 5, 6, 1, 2}, 10)).ok());
  s.Update(s.Schedule(), {{1, {3}}, {2, {3}}, {3, {3}}});
  for (const auto& seq : s.Schedule().sequences) EXPECT_EQ(seq.num_draft, 0);  // three running
  s.Finish(3, FinishReason::kCancelled);
  StepPlan two = s.Schedule();
  ASSERT_EQ(two.sequences.size(), 2u);
  for (const auto& seq : two.sequences) EXPECT_GT(seq.num_draft, 0);
}

// A fake model over a small vocabulary whose next token is a function of
// the token at the row and its position (so every row of a verification
// step is what a one-token decode at that position gives): next =
// cycle[token] most of the time, and at positions in `detour` something
// else, which rejects a proposal copied from the cycle.
class CycleModel : public testing::LogitsExecutor {
 public:
  static constexpr std::int64_t kVocab = 32;
  StatusOr<StepLogits> Forward(const StepPlan& plan) override {
    ++forwards;
    for (const auto& s : plan.sequences) drafts += s.num_draft;
    if (!peaked) {
      return testing::OneHotRows(plan, kVocab, 12.0f, [&](const ScheduledSequence& s, std::size_t i) {
        return Next(s.token_ids[i], s.start_position + static_cast<std::int64_t>(i));
      });
    }
    // A soft row (for seeded sampling): the choice is likely, others possible.
    StepLogits out = testing::OneHotRows(plan, kVocab, 2.5f, [&](const ScheduledSequence& s, std::size_t i) {
      return Next(s.token_ids[i], s.start_position + static_cast<std::int64_t>(i));
    });
    return out;
  }
  std::int64_t vocab_size() const override { return kVocab; }
  static std::int64_t Next(TokenId t, std::int64_t position) {
    if (position % 7 == 5) return (t * 5 + 3) % kVocab;  // detour
    return (t % 6) + 1;                                  // 1 2 3 4 5 6 1 ...
  }
  int forwards = 0;
  std::int64_t drafts = 0;
  bool peaked = false;
};

struct Outcome {
  std::vector<Ids> tokens;
  std::vector<std::vector<double>> logprobs;
  std::vector<FinishReason> reasons;
  int forwards = 0;
  std::int64_t drafts = 0;
  std::uint64_t accepted = 0, proposed = 0, preemptions = 0, prefix_hits = 0;
};

Outcome RunAll(int k, const std::vector<EngineRequest>& requests, bool peaked = false, int num_blocks = 64) {
  CycleModel model;
  model.peaked = peaked;
  EngineConfig c;
  c.num_blocks = num_blocks;
  c.block_size = 4;
  c.eos_token_ids = {31};
  c.scheduler.max_model_len = 128;
  c.scheduler.speculative = Ngram(k, 1, 3);
  Engine e(c, model);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : requests) {
    auto s = e.Submit(r);
    EXPECT_TRUE(s.ok());
    streams.push_back(*s);
  }
  e.RunUntilIdle();
  Outcome out;
  for (auto& s : streams) {
    Ids ids;
    std::vector<double> lps;
    for (;;) {
      StreamChunk c = s->Next(std::chrono::seconds(0));
      for (const auto& t : c.tokens) {
        ids.push_back(t.id);
        lps.push_back(t.logprob);
      }
      if (c.finished) {
        out.reasons.push_back(c.finish_reason);
        break;
      }
    }
    out.tokens.push_back(ids);
    out.logprobs.push_back(lps);
  }
  out.forwards = model.forwards;
  out.drafts = model.drafts;
  out.accepted = e.stats().spec_accepted_tokens;
  out.proposed = e.stats().spec_draft_tokens;
  out.preemptions = e.stats().preemptions;
  out.prefix_hits = e.stats().prefix_hits;
  EXPECT_EQ(static_cast<std::int64_t>(out.proposed), out.drafts);
  std::uint64_t by_position = 0;
  for (const auto& n : e.stats().spec_accepted_per_position) by_position += n;
  EXPECT_EQ(by_position, out.accepted);
  return out;
}

EngineRequest Request(Ids prompt, std::int64_t max_tokens) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  return r;
}

std::vector<EngineRequest> Requests() {
  std::vector<EngineRequest> out;
  out.push_back(Request({1, 2, 3, 4, 5, 6, 1, 2}, 40));
  out.push_back(Request({3, 4, 5}, 25));
  out.push_back(Request({7, 8, 9, 10, 1, 2, 3}, 17));
  out.push_back(Request({2}, 1));
  return out;
}

TEST(SpeculativeEngine, GreedyOutputEqualsNonSpeculativeDecoding) {
  const Outcome plain = RunAll(0, Requests());
  EXPECT_EQ(plain.drafts, 0);
  for (int k : {1, 2, 4, 8}) {
    const Outcome spec = RunAll(k, Requests());
    EXPECT_EQ(spec.tokens, plain.tokens) << "k = " << k;
    EXPECT_EQ(spec.logprobs, plain.logprobs) << "k = " << k;
    EXPECT_EQ(spec.reasons, plain.reasons) << "k = " << k;
    // The cycle is proposed and mostly accepted; the detours reject.
    EXPECT_GT(spec.accepted, 0u) << "k = " << k;
    EXPECT_LT(spec.accepted, spec.proposed) << "k = " << k;
    EXPECT_LT(spec.forwards, plain.forwards) << "k = " << k;
  }
}

TEST(SpeculativeEngine, SeededSamplingDrawsTheSameTokens) {
  auto seeded = [] {
    auto rs = Requests();
    std::uint64_t seed = 11;
    for (auto& r : rs) {
      r.sampling.temperature = 1.0;
      r.sampling.seed = seed++;
    }
    return rs;
  };
  const Outcome plain = RunAll(0, seeded(), /*peaked=*/true);
  const Outcome spec = RunAll(4, seeded(), /*peaked=*/true);
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_GT(spec.accepted, 0u);
}

// Bans token 4 after a 3 (a processor that reads the tokens so far: it
// must see the accepted drafts, and only them).
class NoFourAfterThree : public LogitsProcessor {
 public:
  void Process(std::span<const TokenId> generated, std::span<float> logits) override {
    if (!generated.empty() && generated.back() == 3) logits[4] = -1e9f;
  }
};

TEST(SpeculativeEngine, ProcessorsStopIdsAndOptOutKeepTheOutput) {
  auto with = [] {
    auto rs = Requests();
    rs[0].processor = std::make_shared<NoFourAfterThree>();
    rs[1].stop.stop_token_ids = {2};  // ends inside an accepted run
    rs[2].speculative = false;
    rs[2].max_tokens = 30;
    return rs;
  };
  const Outcome plain = RunAll(0, with());
  const Outcome spec = RunAll(4, with());
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_EQ(spec.reasons, plain.reasons);
  EXPECT_EQ(spec.reasons[1], FinishReason::kStop);
}

TEST(SpeculativeEngine, PreemptionAndPrefixHitsKeepTheOutput) {
  // Eight copies of a prompt over a pool too small for all: preemption and
  // prefix hits on blocks first computed with drafts in them.
  std::vector<EngineRequest> rs;
  for (int i = 0; i < 8; ++i) rs.push_back(Request({1, 2, 3, 4, 5, 6, 1, 2, 3}, 30 + i));
  const Outcome plain = RunAll(0, rs, false, 40);
  const Outcome spec = RunAll(4, rs, false, 40);
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_GT(spec.accepted, 0u);
  EXPECT_GT(spec.preemptions, 0u);
  EXPECT_GT(spec.prefix_hits, 0u);
}

}  // namespace
}  // namespace ropeserve
