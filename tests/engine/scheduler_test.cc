// Scheduler decisions without a model: budget packing, chunked prefill,
// prefix hits, preemption by recompute, cancellation, deadlines, overload
// and never-fits rejection.
#include "server/engine/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

namespace ropeserve {
namespace {

RequestSpec Spec(RequestId id, int prompt_len, int max_tokens = 4, int first_token = 1000) {
  RequestSpec s;
  s.id = id;
  s.prompt.resize(prompt_len);
  std::iota(s.prompt.begin(), s.prompt.end(), first_token + static_cast<int>(id) * 100);
  s.max_tokens = max_tokens;
  return s;
}

// Runs one step as an engine would: every sequence that needs logits gets
// token 7. `tables` mirrors the block tables as a runner would from the
// plans' diffs.
StepPlan Step(Scheduler& s, std::int64_t prefill_budget = -1, BlockTables* tables = nullptr) {
  StepPlan plan = s.Schedule(Clock::now(), prefill_budget);
  if (tables != nullptr) tables->Apply(plan);
  std::map<RequestId, std::vector<TokenId>> sampled;
  for (const auto& seq : plan.sequences)
    if (seq.needs_logits) sampled[seq.request_id] = {7};
  s.Update(plan, sampled);
  return plan;
}

std::vector<std::pair<RequestId, size_t>> Shape(const StepPlan& p) {
  std::vector<std::pair<RequestId, size_t>> out;
  for (const auto& s : p.sequences) out.emplace_back(s.request_id, s.token_ids.size());
  return out;
}

using Shp = std::vector<std::pair<RequestId, size_t>>;

TEST(Scheduler, PacksPrefillsIntoTheTokenBudgetAndChunksTheRest) {
  BlockPool pool(64, 4);
  SchedulerConfig c;
  c.max_num_batched_tokens = 10;
  Scheduler s(c, pool);
  ASSERT_TRUE(s.Add(Spec(1, 6)).ok());
  ASSERT_TRUE(s.Add(Spec(2, 7)).ok());
  BlockTables tables;
  StepPlan p1 = Step(s, -1, &tables);
  EXPECT_EQ(Shape(p1), (Shp{{1, 6}, {2, 4}}));  // request 2 chunked
  EXPECT_TRUE(p1.sequences[0].needs_logits);
  EXPECT_FALSE(p1.sequences[1].needs_logits);
  EXPECT_TRUE(p1.sequences[1].reset_blocks);  // the runner's first sight of it
  EXPECT_EQ(tables.Of(2), (std::vector<BlockId>{2}));
  StepPlan p2 = Step(s, -1, &tables);
  EXPECT_EQ(Shape(p2), (Shp{{1, 1}, {2, 3}}));  // decode + rest of the prefill
  EXPECT_EQ(p2.sequences[1].start_position, 4);
  // Only what changed travels: request 2's new block, nothing for 1.
  EXPECT_FALSE(p2.sequences[1].reset_blocks);
  EXPECT_EQ(p2.sequences[1].new_blocks, (std::vector<BlockId>{3}));
  EXPECT_TRUE(p2.sequences[0].new_blocks.empty());
  EXPECT_EQ(tables.Of(2), (std::vector<BlockId>{2, 3}));
  EXPECT_EQ(tables.Of(1), (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(Shape(Step(s)), (Shp{{1, 1}, {2, 1}}));
}

TEST(Scheduler, APrefillBudgetCapsChunksButNeverDecodes) {
  // The engine lowers the prefill budget to leave room for encoder windows.
  BlockPool pool(64, 4);
  SchedulerConfig c;
  c.max_num_batched_tokens = 10;
  Scheduler s(c, pool);
  ASSERT_TRUE(s.Add(Spec(1, 3)).ok());
  EXPECT_EQ(Shape(Step(s)), (Shp{{1, 3}}));
  ASSERT_TRUE(s.Add(Spec(2, 9)).ok());
  ASSERT_TRUE(s.Add(Spec(3, 5)).ok());
  // Request 1 decodes; 2 gets 4 prefill tokens, 3 none.
  EXPECT_EQ(Shape(Step(s, 4)), (Shp{{1, 1}, {2, 4}}));
  // No prefill budget: the decode still runs, the chunks wait.
  EXPECT_EQ(Shape(Step(s, 0)), (Shp{{1, 1}}));
  // The whole budget again: 2 finishes its prompt, 3 starts.
  EXPECT_EQ(Shape(Step(s)), (Shp{{1, 1}, {2, 5}, {3, 4}}));
}

TEST(Scheduler, PrefillBesideDecodesIsCappedButAloneUsesTheWholeBudget) {
  BlockPool pool(64, 4);
  SchedulerConfig c;
  c.max_num_batched_tokens = 16;
  c.max_prefill_tokens_while_decoding = 3;
  ASSERT_TRUE(c.Validate().ok());
  Scheduler s(c, pool);
  ASSERT_TRUE(s.Add(Spec(1, 12)).ok());
  EXPECT_EQ(Shape(Step(s)), (Shp{{1, 12}}));  // nothing decodes yet: the whole budget
  ASSERT_TRUE(s.Add(Spec(2, 10)).ok());
  EXPECT_EQ(Shape(Step(s)), (Shp{{1, 1}, {2, 3}}));  // request 1 decodes: 3 prompt tokens beside it
  EXPECT_EQ(Shape(Step(s)), (Shp{{1, 1}, {2, 3}}));
  c.max_prefill_tokens_while_decoding = -1;
  EXPECT_FALSE(c.Validate().ok());
}

TEST(Scheduler, MaxNumSeqsLimitsTheBatch) {
  BlockPool pool(64, 4);
  SchedulerConfig c;
  c.max_num_seqs = 2;
  Scheduler s(c, pool);
  for (RequestId id = 1; id <= 3; ++id) ASSERT_TRUE(s.Add(Spec(id, 2)).ok());
  EXPECT_EQ(Shape(Step(s)), (Shp{{1, 2}, {2, 2}}));
  EXPECT_EQ(s.num_waiting(), 1);
  s.Finish(1, FinishReason::kStop);
  EXPECT_EQ(Shape(Step(s)), (Shp{{2, 1}, {3, 2}}));
}

TEST(Scheduler, PrefixHitSkipsCachedBlocksButComputesTheLastToken) {
  BlockPool pool(64, 4);
  Scheduler s(SchedulerConfig{}, pool);
  RequestSpec a = Spec(1, 9);
  RequestSpec b = a;
  b.id = 2;
  ASSERT_TRUE(s.Add(a).ok());
  Step(s);
  s.Finish(1, FinishReason::kStop);
  ASSERT_TRUE(s.Add(b).ok());
  StepPlan p = Step(s);
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].start_position, 8);  // two full blocks hit
  EXPECT_EQ(p.sequences[0].token_ids.size(), 1u);
  EXPECT_EQ(s.num_cached_prompt_tokens(2), 8);
  // Exactly one block's worth is left to compute even when everything is cached.
  RequestSpec c = Spec(3, 8);
  c.prompt = std::vector<TokenId>(a.prompt.begin(), a.prompt.begin() + 8);
  ASSERT_TRUE(s.Add(c).ok());
  StepPlan pc = Step(s);
  EXPECT_EQ(pc.sequences.back().start_position, 4);
  EXPECT_EQ(pc.sequences.back().token_ids.size(), 4u);
}

// Prompt logprobs: every prompt position after the first is a target
// exactly once, in order, at most kMaxPromptLogprobRows a step, and such a
// request takes no prefix hit.
TEST(Scheduler, PromptLogprobTargetsCoverThePromptOnceWithinTheRowCap) {
  BlockPool pool(512, 4);
  SchedulerConfig c;
  c.max_num_batched_tokens = 1000;
  Scheduler s(c, pool);
  RequestSpec warm = Spec(1, 600);
  ASSERT_TRUE(s.Add(warm).ok());
  while (s.num_running() + s.num_waiting() > 0 && Step(s).num_tokens() > 1) {
  }
  s.Finish(1, FinishReason::kStop);
  RequestSpec a = warm;  // the same prompt: all in the prefix cache
  a.id = 2;
  a.prompt_logprobs = 2;
  RequestSpec b = Spec(3, 5);
  b.prompt_logprobs = 0;
  ASSERT_TRUE(s.Add(a).ok());
  ASSERT_TRUE(s.Add(b).ok());
  std::map<RequestId, std::vector<TokenId>> targets;
  std::map<RequestId, std::int64_t> next = {{2, 1}, {3, 1}};
  for (int step = 0; step < 10; ++step) {
    StepPlan p = Step(s);
    std::int64_t rows = 0;
    for (const auto& seq : p.sequences) {
      if (seq.request_id == 2) {
        EXPECT_EQ(seq.prompt_top_logprobs, 2u);
      }
      if (seq.prompt_logprob_targets.empty()) continue;
      if (seq.request_id == 2 && step == 0) {
        EXPECT_EQ(seq.start_position, 0);  // no prefix hit
      }
      EXPECT_EQ(seq.prompt_logprobs_from, next[seq.request_id]);
      // Each target's row (position - 1) lies in this chunk.
      EXPECT_GE(seq.prompt_logprobs_from - 1, seq.start_position);
      EXPECT_LE(seq.prompt_logprobs_from - 1 + static_cast<std::int64_t>(seq.prompt_logprob_targets.size()),
                seq.context_length());
      next[seq.request_id] += static_cast<std::int64_t>(seq.prompt_logprob_targets.size());
      rows += static_cast<std::int64_t>(seq.prompt_logprob_targets.size());
      auto& t = targets[seq.request_id];
      t.insert(t.end(), seq.prompt_logprob_targets.begin(), seq.prompt_logprob_targets.end());
    }
    EXPECT_LE(rows, kMaxPromptLogprobRows) << step;
  }
  EXPECT_EQ(targets[2], std::vector<TokenId>(a.prompt.begin() + 1, a.prompt.end()));
  EXPECT_EQ(targets[3], std::vector<TokenId>(b.prompt.begin() + 1, b.prompt.end()));
}

TEST(Scheduler, PreemptsTheLatestArrivalAndRecomputesItLater) {
  BlockPool pool(4, 2);  // 8 token slots
  Scheduler s(SchedulerConfig{}, pool);
  ASSERT_TRUE(s.Add(Spec(1, 3, 4)).ok());
  ASSERT_TRUE(s.Add(Spec(2, 3, 4)).ok());
  BlockTables tables;
  EXPECT_EQ(Shape(Step(s, -1, &tables)), (Shp{{1, 3}, {2, 3}}));  // 4 blocks in use
  EXPECT_EQ(Shape(Step(s, -1, &tables)), (Shp{{1, 1}, {2, 1}}));  // positions 3: still in block 1
  // Position 4 needs a third block each: request 2 (latest) is preempted.
  EXPECT_EQ(Shape(Step(s, -1, &tables)), (Shp{{1, 1}}));
  EXPECT_EQ(s.num_preemptions(), 1u);
  EXPECT_EQ(s.num_waiting(), 1);
  // Its tokens so far (3 prompt + 2 generated) are kept for the recompute.
  EXPECT_EQ(s.Tokens(2)->size(), 5u);
  s.Finish(1, FinishReason::kLength);
  // Recompute: request 2's first block survived in the prefix cache (its
  // second was evicted first, to give request 1 a block), so 3 of 5 tokens
  // are recomputed.
  StepPlan p = Step(s, -1, &tables);
  EXPECT_EQ(Shape(p), (Shp{{2, 3}}));
  EXPECT_EQ(p.sequences[0].start_position, 2);
  EXPECT_TRUE(p.sequences[0].needs_logits);
  // The runner's table for it starts over (the old blocks are gone).
  EXPECT_TRUE(p.sequences[0].reset_blocks);
  EXPECT_EQ(tables.Of(2).size(), 3u);  // 5 tokens in blocks of 2
}

TEST(Scheduler, HigherPriorityValueIsPreemptedFirst) {
  BlockPool pool(4, 2);
  Scheduler s(SchedulerConfig{}, pool);
  RequestSpec low = Spec(1, 3, 4);
  low.priority = 5;
  ASSERT_TRUE(s.Add(low).ok());
  ASSERT_TRUE(s.Add(Spec(2, 3, 4)).ok());
  Step(s);
  Step(s);
  EXPECT_EQ(Shape(Step(s)), (Shp{{2, 1}}));  // request 1 (priority 5) gave way
}

// Background requests (batch lines) run only in steps where no other
// request runs: they fill the gaps, and an interactive request arriving
// takes the steps back at once.
TEST(Scheduler, BackgroundRequestsRunOnlyInTheGaps) {
  BlockPool pool(64, 4);
  SchedulerConfig c;
  c.background_priority = 1001;
  Scheduler s(c, pool);
  RequestSpec bg = Spec(1, 3, 8);
  bg.priority = 1001;
  ASSERT_TRUE(s.Add(bg).ok());
  EXPECT_EQ(Shape(Step(s)), (Shp{{1, 3}}));  // alone: it runs
  EXPECT_EQ(Shape(Step(s)), (Shp{{1, 1}}));
  ASSERT_TRUE(s.Add(Spec(2, 2, 2)).ok());
  // The step that admits request 2 still decodes request 1 (it was alone
  // when the step began); from then on request 1 waits, keeping its place.
  EXPECT_EQ(Shape(Step(s)), (Shp{{1, 1}, {2, 2}}));
  EXPECT_EQ(Shape(Step(s)), (Shp{{2, 1}}));
  RequestSpec bg2 = Spec(3, 2, 2);
  bg2.priority = 1001;
  ASSERT_TRUE(s.Add(bg2).ok());
  EXPECT_EQ(Shape(Step(s)), (Shp{{2, 1}}));  // a new background request is not admitted either
  EXPECT_EQ(s.num_waiting(), 1);
  s.Finish(2, FinishReason::kStop);
  EXPECT_EQ(Shape(Step(s)), (Shp{{1, 1}, {3, 2}}));  // the gap: both background requests run
  // Without a background class (the default) the same requests share steps.
  Scheduler shared(SchedulerConfig{}, pool);
  ASSERT_TRUE(shared.Add(bg).ok());
  Step(shared);
  ASSERT_TRUE(shared.Add(Spec(2, 2, 2)).ok());
  Step(shared);
  EXPECT_EQ(Shape(Step(shared)), (Shp{{1, 1}, {2, 1}}));
}

TEST(Scheduler, CancellationAndDeadlinesFreeEveryBlock) {
  BlockPool pool(16, 4);
  Scheduler s(SchedulerConfig{}, pool);
  RequestSpec timed = Spec(2, 5);
  timed.deadline = Clock::now() + std::chrono::hours(1);
  ASSERT_TRUE(s.Add(Spec(1, 5)).ok());
  ASSERT_TRUE(s.Add(timed).ok());
  ASSERT_TRUE(s.Add(Spec(3, 5)).ok());
  Step(s);
  EXPECT_LT(pool.num_free(), 16);
  s.Finish(1, FinishReason::kCancelled);
  StepPlan p = s.Schedule(Clock::now() + std::chrono::hours(2));  // 2's deadline passed
  s.Update(p, {});
  EXPECT_EQ(Shape(p), (Shp{{3, 1}}));
  std::vector<std::pair<RequestId, FinishReason>> finished;
  for (auto& [r, reason] : s.TakeFinished()) finished.emplace_back(r->spec.id, reason);
  EXPECT_EQ(finished, (std::vector<std::pair<RequestId, FinishReason>>{{1, FinishReason::kCancelled},
                                                                       {2, FinishReason::kDeadline}}));
  s.Finish(3, FinishReason::kCancelled);
  EXPECT_EQ(pool.num_free(), 16);
  EXPECT_FALSE(s.has_work());
}

TEST(Scheduler, RejectsWhatCanNeverRunAndOverload) {
  BlockPool pool(4, 4);  // 16 slots
  SchedulerConfig c;
  c.max_model_len = 12;
  c.max_waiting_requests = 2;
  Scheduler s(c, pool);
  Status too_long = s.Add(Spec(1, 10, 4)).status();
  EXPECT_EQ(too_long.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("maximum context length is 12"), std::string::npos);
  EXPECT_EQ(s.Add(Spec(2, 0)).status().code(), ErrorCode::kInvalidArgument);
  BlockPool tiny(2, 4);  // 8 slots < 6 + 4
  Scheduler t(c, tiny);
  Status never = t.Add(Spec(3, 6, 4)).status();
  EXPECT_EQ(never.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(never.message().find("can never run"), std::string::npos);
  ASSERT_TRUE(s.Add(Spec(4, 2)).ok());
  ASSERT_TRUE(s.Add(Spec(5, 2)).ok());
  EXPECT_EQ(s.Add(Spec(6, 2)).status().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(s.Add(Spec(4, 2)).status().code(), ErrorCode::kInvalidArgument);  // duplicate id
}

}  // namespace
}  // namespace ropeserve
