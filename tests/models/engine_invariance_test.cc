// Model-level invariants of the engine on a tiny model: a request's output
// does not depend on what else is batched with it, on preemption, on prefix
// sharing or on cancellations around it.
#include <gtest/gtest.h>

#include <random>

#include "server/engine/engine.h"
#include "server/models/decoder.h"
#include "server/runner/generate.h"
#include "server/runner/model_runner.h"
#include "tests/checkpoint/test_checkpoints.h"

namespace ropeserve {
namespace {

using testing::ScratchDir;

class EngineInvariance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    auto o = testing::TinyOptions("qwen2");
    o.max_position_embeddings = 512;
    testing::MakeTinyCheckpoint(dir_->path(), o);
    auto m = DecoderModel::Load(dir_->path(), DType::kF32);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete dir_;
  }

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

  // Runs every prompt through one engine, all submitted together.
  static std::vector<std::vector<TokenId>> RunBatch(Engine& engine, const std::vector<std::vector<TokenId>>& prompts,
                                                    std::int64_t max_tokens, SamplingParams sampling = {}) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& p : prompts) {
      EngineRequest r;
      r.prompt = p;
      r.max_tokens = max_tokens;
      r.ignore_eos = true;
      r.sampling = sampling;
      auto s = engine.Submit(r);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      streams.push_back(*s);
    }
    engine.RunUntilIdle();
    std::vector<std::vector<TokenId>> out;
    for (auto& s : streams) {
      StreamChunk c = s->Next(std::chrono::seconds(0));
      EXPECT_TRUE(c.finished);
      std::vector<TokenId> ids;
      for (auto& t : c.tokens) ids.push_back(t.id);
      out.push_back(ids);
    }
    return out;
  }

  static std::vector<TokenId> Alone(const std::vector<TokenId>& prompt, std::int64_t max_tokens, bool reference) {
    GenerateOptions o;
    o.max_tokens = max_tokens;
    o.ignore_eos = true;
    o.use_reference = reference;
    auto r = Generate(*model_, std::vector<std::int64_t>(prompt.begin(), prompt.end()), o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::vector<TokenId>(r->generated_ids.begin(), r->generated_ids.end());
  }

  static ScratchDir* dir_;
  static DecoderModel* model_;
};
ScratchDir* EngineInvariance::dir_ = nullptr;
DecoderModel* EngineInvariance::model_ = nullptr;

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
  ModelRunner ref_runner(*model_, 512, 4, /*reference_attention=*/true);
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
    r.ignore_eos = true;
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
    cancelled += c.finish_reason == "cancelled";
  }
  engine.Stop();
  EXPECT_GT(cancelled, 0);
  EXPECT_EQ(engine.pool().num_free(), 200);
}

TEST_F(EngineInvariance, SeededSamplingIsTheSameAloneAndInABatch) {
  const auto prompts = Prompts(16, 6);
  SamplingParams p;
  p.temperature = 0.9;
  p.top_p = 0.95;
  p.seed = 1234;
  ModelRunner runner(*model_, 512, 4);
  Engine batch_engine(Config(512), runner);
  const auto batched = RunBatch(batch_engine, prompts, 10, p);
  for (size_t i = 0; i < prompts.size(); i += 3) {
    ModelRunner alone_runner(*model_, 64, 4);
    Engine alone(Config(64), alone_runner);
    ASSERT_EQ(RunBatch(alone, {prompts[i]}, 10, p)[0], batched[i]) << "request " << i;
  }
}

}  // namespace
}  // namespace ropeserve
