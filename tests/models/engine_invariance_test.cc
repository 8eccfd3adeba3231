// Model-level invariants of the engine on a tiny model: a request's output
// does not depend on what else is batched with it, on preemption, on prefix
// sharing or on cancellations around it.
#include <gtest/gtest.h>

#include <random>

#include "server/engine/engine.h"
#include "server/models/decoder.h"
#include "server/runner/model_runner.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/common/float_bounds.h"
#include "tests/common/offline.h"
#include "tests/models/reference_decoder.h"
#include "tests/models/tiny_model_suite.h"

namespace ropeserve {
namespace {

using testing::ScratchDir;

class EngineInvariance : public testing::TinyModelSuite {
 protected:
  static void SetUpTestSuite() { Load(512); }

  static std::vector<std::vector<TokenId>> Prompts(int n, std::uint64_t seed, const std::vector<TokenId>& prefix = {}) {
    std::mt19937_64 rng(seed);
    std::vector<std::vector<TokenId>> out;
    for (int i = 0; i < n; ++i) {
      std::vector<TokenId> p = prefix;
      const int len = 1 + static_cast<int>(rng() % 40);
      for (int j = 0; j < len; ++j) p.push_back(static_cast<TokenId>(rng() % 297));
      out.push_back(p);
    }
    return out;
  }

  static EngineConfig Config(int num_blocks, int block_size = 4) {
    EngineConfig c;
    c.num_blocks = num_blocks;
    c.block_size = block_size;
    c.scheduler.max_model_len = 512;
    c.scheduler.max_num_seqs = 64;
    c.scheduler.max_num_batched_tokens = 96;
    return c;
  }

  // Every prompt through one engine, all submitted together: the tokens,
  // and their logprobs in `logprobs` when given.
  static std::vector<std::vector<TokenId>> RunBatch(Engine& engine, const std::vector<std::vector<TokenId>>& prompts,
                                                    std::int64_t max_tokens, SamplingParams sampling = {},
                                                    std::vector<std::vector<double>>* logprobs = nullptr) {
    const auto streams = SubmitAll(engine, prompts, std::vector<std::int64_t>(prompts.size(), max_tokens), sampling);
    engine.RunUntilIdle();
    Outputs out = Collect(streams);
    if (logprobs != nullptr) *logprobs = std::move(out.logprobs);
    return out.tokens;
  }

  // One request alone: through its own engine, or (reference) by dense
  // greedy recompute through testing::ReferenceForward.
  static std::vector<TokenId> Alone(const std::vector<TokenId>& prompt, std::int64_t max_tokens, bool reference) {
    if (reference) return testing::ReferenceGreedy(*model_, prompt, static_cast<int>(max_tokens));
    ModelRunner runner(*model_, 64, 4);
    Engine engine(Config(64), runner);
    return RunBatch(engine, {prompt}, max_tokens)[0];
  }
};

TEST_F(EngineInvariance, BatchedGreedyEqualsAloneAndReference) {
  const auto prompts = Prompts(64, 1);
  ModelRunner runner(*model_, 512, 4);
  Engine engine(Config(512), runner);
  const auto batched = RunBatch(engine, prompts, 12);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(batched[i], Alone(prompts[i], 12, false)) << "request " << i;
    if (i % 8 == 0) {
      ASSERT_EQ(batched[i], Alone(prompts[i], 12, true)) << "request " << i << " vs reference";
    }
  }
  EXPECT_EQ(engine.stats().preemptions, 0u);
  EXPECT_EQ(engine.pool().num_free(), 512);
  // The same batch through the gather-based reference attention.
  const testing::ReferenceAttentionModel reference(*model_);
  ModelRunner ref_runner(reference, 512, 4);
  Engine ref_engine(Config(512), ref_runner);
  EXPECT_EQ(RunBatch(ref_engine, prompts, 12), batched);
}

TEST_F(EngineInvariance, PreemptionLeavesOutputsUnchanged) {
  const auto prompts = Prompts(64, 2);
  ModelRunner runner(*model_, 40, 4);  // 160 slots for 64 requests of up to 52 tokens
  Engine engine(Config(40), runner);
  const auto batched = RunBatch(engine, prompts, 12);
  EXPECT_GT(engine.stats().preemptions, 0u);
  for (size_t i = 0; i < prompts.size(); ++i) ASSERT_EQ(batched[i], Alone(prompts[i], 12, false)) << "request " << i;
  EXPECT_EQ(engine.pool().num_free(), 40);
}

TEST_F(EngineInvariance, SharedSystemPromptHitsThePrefixCache) {
  std::vector<TokenId> system(24);
  for (int i = 0; i < 24; ++i) system[i] = 10 + i;
  const auto prompts = Prompts(16, 3, system);
  ModelRunner runner(*model_, 256, 4);
  Engine engine(Config(256), runner);
  // The first request warms the cache; the rest share its blocks.
  const auto first = RunBatch(engine, {prompts[0]}, 6);
  const auto rest = RunBatch(engine, std::vector<std::vector<TokenId>>(prompts.begin() + 1, prompts.end()), 6);
  EXPECT_GE(engine.stats().prefix_hits, 15u * 6u);  // 6 full blocks of 4 each
  EXPECT_EQ(first[0], Alone(prompts[0], 6, false));
  for (size_t i = 1; i < prompts.size(); ++i) ASSERT_EQ(rest[i - 1], Alone(prompts[i], 6, false)) << i;
}

TEST_F(EngineInvariance, CancellingHalfReturnsEveryBlock) {
  const auto prompts = Prompts(64, 4);
  ModelRunner runner(*model_, 200, 4);
  Engine engine(Config(200), runner);
  engine.Start();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : prompts) {
    EngineRequest r;
    r.prompt = p;
    r.max_tokens = 40;
    r.stop.ignore_eos = true;
    streams.push_back(*engine.Submit(r));
  }
  // Cancel every other request at a point measured in its own tokens (not
  // in wall time, which depends on how fast the machine is).
  std::vector<StreamChunk> early(streams.size());
  for (size_t i = 0; i < streams.size(); i += 2) {
    const size_t want = 1 + i % 7;
    size_t got = 0;
    while (got < want) {
      StreamChunk c = streams[i]->Next(std::chrono::seconds(60));
      got += c.tokens.size();
      if (c.finished) {
        early[i] = c;
        break;
      }
    }
    engine.Cancel(streams[i]->id());
  }
  int cancelled = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    StreamChunk c = early[i];
    while (!c.finished) c = streams[i]->Next(std::chrono::seconds(60));
    cancelled += c.finish_reason == FinishReason::kCancelled;
  }
  engine.Stop();
  EXPECT_GT(cancelled, 0);
  EXPECT_EQ(engine.pool().num_free(), 200);
}

// The sampler lives in the runner with each request's own seeded generator
// (kept across preemption): the same seeded requests give the same tokens
// alone, in a batch, and in a batch short of KV blocks; their logprobs agree
// up to the rounding of GEMMs of other shapes.
TEST_F(EngineInvariance, SeededSamplingIsTheSameAloneInABatchAndPreempted) {
  const auto prompts = Prompts(16, 6);
  SamplingParams p = Seeded(1234);
  ModelRunner runner(*model_, 512, 4);
  Engine batch_engine(Config(512), runner);
  std::vector<std::vector<double>> batched_lp;
  const auto batched = RunBatch(batch_engine, prompts, 10, p, &batched_lp);
  ModelRunner tight_runner(*model_, 24, 4);  // 96 slots for 16 requests of up to 50 tokens
  Engine tight(Config(24), tight_runner);
  std::vector<std::vector<double>> tight_lp;
  EXPECT_EQ(RunBatch(tight, prompts, 10, p, &tight_lp), batched);
  EXPECT_GT(tight.stats().preemptions, 0u);
  const ModelConfig& c = model_->config();
  const double bound = testing::RoundingBound(std::max<std::int64_t>({c.hidden_size, c.intermediate_size, 60}),
                                              c.num_hidden_layers, 20.0);  // the tiny models' logits are within +-20
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (size_t k = 0; k < batched_lp[i].size(); ++k) EXPECT_NEAR(tight_lp[i][k], batched_lp[i][k], bound) << i;
    if (i % 3 != 0) continue;
    ModelRunner alone_runner(*model_, 64, 4);
    Engine alone(Config(64), alone_runner);
    std::vector<std::vector<double>> alone_lp;
    ASSERT_EQ(RunBatch(alone, {prompts[i]}, 10, p, &alone_lp)[0], batched[i]) << "request " << i;
    for (size_t k = 0; k < alone_lp[0].size(); ++k) EXPECT_NEAR(alone_lp[0][k], batched_lp[i][k], bound) << i;
  }
}

}  // namespace
}  // namespace ropeserve
