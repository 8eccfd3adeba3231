// The engine loop with a fake model (no LibTorch): stop conditions, stream
// contents, admission verdicts and executor failures.
#include "server/engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ropeserve {
namespace {

// Logits that make the next token (last token + 1) % vocab, by a wide margin.
class CountingModel : public ModelExecutor {
 public:
  explicit CountingModel(std::int64_t vocab) : vocab_(vocab) {}
  StatusOr<StepLogits> Execute(const StepPlan& plan) override {
    ++calls;
    if (fail_next) {
      fail_next = false;
      return Internal("device lost");
    }
    auto buf = std::make_shared<std::vector<float>>();
    StepLogits out;
    out.vocab = vocab_;
    for (const auto& s : plan.sequences) {
      if (!s.needs_logits) continue;
      std::vector<float> row(static_cast<size_t>(vocab_), 0.0f);
      row[static_cast<size_t>((s.token_ids.back() + 1) % vocab_)] = 20.0f;
      buf->insert(buf->end(), row.begin(), row.end());
      ++out.rows;
    }
    out.data = buf->data();
    out.owner = buf;
    return out;
  }
  std::int64_t vocab_size() const override { return vocab_; }
  int calls = 0;
  bool fail_next = false;

 private:
  std::int64_t vocab_;
};

EngineConfig Config() {
  EngineConfig c;
  c.num_blocks = 32;
  c.block_size = 4;
  c.eos_token_ids = {9};
  c.scheduler.max_model_len = 64;
  return c;
}

std::vector<TokenId> Ids(const StreamChunk& c) {
  std::vector<TokenId> ids;
  for (const auto& t : c.tokens) ids.push_back(t.id);
  return ids;
}

StreamChunk RunOne(Engine& e, EngineRequest r) {
  auto s = e.Submit(std::move(r));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  e.RunUntilIdle();
  return (*s)->Next(std::chrono::seconds(0));
}

TEST(Engine, StopsAtMaxTokensEosAndStopIds) {
  CountingModel m(20);
  Engine e(Config(), m);
  EngineRequest r;
  r.prompt = {1, 2};
  r.max_tokens = 4;
  StreamChunk c = RunOne(e, r);
  EXPECT_EQ(Ids(c), (std::vector<TokenId>{3, 4, 5, 6}));
  EXPECT_EQ(c.finish_reason, "length");
  EXPECT_EQ(c.prompt_tokens, 2);

  r.prompt = {5};
  r.max_tokens = 10;
  c = RunOne(e, r);  // 6 7 8 9=eos
  EXPECT_EQ(Ids(c), (std::vector<TokenId>{6, 7, 8, 9}));
  EXPECT_EQ(c.finish_reason, "stop");

  r.ignore_eos = true;
  r.stop_token_ids = {11};
  c = RunOne(e, r);
  EXPECT_EQ(Ids(c), (std::vector<TokenId>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(c.finish_reason, "stop");

  r.ignore_eos = false;
  r.stop_token_ids = {};
  r.min_tokens = 6;  // EOS at token 4 is ignored
  c = RunOne(e, r);
  EXPECT_EQ(Ids(c), (std::vector<TokenId>{6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(e.pool().num_free(), 32);
}

TEST(Engine, TopLogprobsAndLogprobsAreReported) {
  CountingModel m(20);
  Engine e(Config(), m);
  EngineRequest r;
  r.prompt = {1};
  r.max_tokens = 1;
  r.top_logprobs = 2;
  StreamChunk c = RunOne(e, r);
  ASSERT_EQ(c.tokens.size(), 1u);
  EXPECT_EQ(c.tokens[0].top_logprobs.size(), 2u);
  EXPECT_EQ(c.tokens[0].top_logprobs[0].first, 2);
  EXPECT_NEAR(c.tokens[0].logprob, c.tokens[0].top_logprobs[0].second, 1e-12);
  EXPECT_GT(c.tokens[0].logprob, -1e-6);
}

TEST(Engine, AdmissionVerdictsComeBackFromSubmit) {
  CountingModel m(20);
  Engine e(Config(), m);
  EngineRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 100;  // > max_model_len 64
  EXPECT_EQ(e.Submit(r).status().code(), ErrorCode::kInvalidArgument);
  r.max_tokens = 4;
  r.prompt = {25};  // outside the vocabulary
  EXPECT_EQ(e.Submit(r).status().code(), ErrorCode::kInvalidArgument);
  r.prompt = {1};
  r.sampling.top_p = 2;
  EXPECT_EQ(e.Submit(r).status().code(), ErrorCode::kInvalidArgument);
}

TEST(Engine, AFailedForwardFailsOnlyItsRequests) {
  CountingModel m(20);
  Engine e(Config(), m);
  EngineRequest r;
  r.prompt = {1};
  r.max_tokens = 3;
  auto a = e.Submit(r);
  ASSERT_TRUE(a.ok());
  m.fail_next = true;
  e.RunUntilIdle();
  StreamChunk c = (*a)->Next(std::chrono::seconds(0));
  EXPECT_EQ(c.finish_reason, "error");
  EXPECT_NE(c.error.message().find("device lost"), std::string::npos);
  // The engine keeps serving.
  StreamChunk ok = RunOne(e, r);
  EXPECT_EQ(ok.finish_reason, "length");
  EXPECT_EQ(e.pool().num_free(), 32);
}

TEST(Engine, ThreadedEngineServesAndShutsDownCleanly) {
  CountingModel m(20);
  Engine e(Config(), m);
  e.Start();
  EngineRequest r;
  r.prompt = {1};
  r.max_tokens = 5;
  auto s = e.Submit(r);
  ASSERT_TRUE(s.ok());
  std::vector<TokenId> got;
  StreamChunk c;
  do {
    c = (*s)->Next(std::chrono::seconds(10));
    for (auto& t : c.tokens) got.push_back(t.id);
  } while (!c.finished);
  EXPECT_EQ(got, (std::vector<TokenId>{2, 3, 4, 5, 6}));
  // A long request still running at Stop() is finished, not abandoned.
  r.max_tokens = 60;
  r.ignore_eos = true;
  auto long_one = e.Submit(r);
  ASSERT_TRUE(long_one.ok());
  e.Stop();
  do {
    c = (*long_one)->Next(std::chrono::seconds(10));
  } while (!c.finished);
  EXPECT_TRUE(c.finish_reason == "cancelled" || c.finish_reason == "length");
}

}  // namespace
}  // namespace ropeserve

#include "server/engine/kv_cache_sizing.h"

namespace ropeserve {
namespace {

TEST(KvCacheSizing, ParsesBytesSuffixesAndFractions) {
  EXPECT_EQ(*ParseKvCacheMemory("1073741824", 0), 1073741824);
  EXPECT_EQ(*ParseKvCacheMemory("4G", 0), 4LL << 30);
  EXPECT_EQ(*ParseKvCacheMemory("512MiB", 0), 512LL << 20);
  EXPECT_EQ(*ParseKvCacheMemory("0.25", 1000), 250);
  EXPECT_FALSE(ParseKvCacheMemory("1.5", 1000).ok());
  EXPECT_FALSE(ParseKvCacheMemory("-1G", 1000).ok());
  EXPECT_FALSE(ParseKvCacheMemory("4X", 1000).ok());
  EXPECT_FALSE(ParseKvCacheMemory("", 1000).ok());
  EXPECT_FALSE(ParseKvCacheMemory("nan", 1000).ok());
}

TEST(KvCacheSizing, CountsWholeBlocksAndRejectsTooLittle) {
  auto s = SizeKvCache(10000, 12, 16, 100);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->num_blocks, 52);  // 10000 / 192
  EXPECT_EQ(s->tokens, 832);
  auto too_small = SizeKvCache(1000, 12, 16, 2048);
  ASSERT_FALSE(too_small.ok());
  EXPECT_NE(too_small.status().message().find("--max-model-len 2048"), std::string::npos);
}

}  // namespace
}  // namespace ropeserve

namespace ropeserve {
namespace {

// Same logits every step: token 3 > 4 > 5 > the rest.
class FavoriteModel : public ModelExecutor {
 public:
  StatusOr<StepLogits> Execute(const StepPlan& plan) override {
    auto buf = std::make_shared<std::vector<float>>();
    StepLogits out;
    out.vocab = 16;
    for (const auto& s : plan.sequences) {
      if (!s.needs_logits) continue;
      std::vector<float> row(16, 0.0f);
      row[3] = 2.0f;
      row[4] = 1.5f;
      row[5] = 1.0f;
      buf->insert(buf->end(), row.begin(), row.end());
      ++out.rows;
    }
    out.data = buf->data();
    out.owner = buf;
    return out;
  }
  std::int64_t vocab_size() const override { return 16; }
};

TEST(Engine, PenaltiesSteerGreedyDecodingAndLogprobsStayRaw) {
  FavoriteModel m;
  Engine e(Config(), m);
  auto run = [&](double rep, double freq, double pres) {
    EngineRequest r;
    r.prompt = {3, 1};
    r.max_tokens = 5;
    r.sampling.repetition_penalty = rep;
    r.sampling.frequency_penalty = freq;
    r.sampling.presence_penalty = pres;
    return RunOne(e, r);
  };
  EXPECT_EQ(Ids(run(1, 0, 0)), (std::vector<TokenId>{3, 3, 3, 3, 3}));
  EXPECT_EQ(Ids(run(1, 0, 1)), (std::vector<TokenId>{3, 4, 3, 3, 3}));  // ties -> lower id
  EXPECT_EQ(Ids(run(1, 1, 0)), (std::vector<TokenId>{3, 4, 3, 5, 4}));
  EXPECT_EQ(Ids(run(4, 0, 0)), (std::vector<TokenId>{4, 5, 3, 3, 3}));  // 3 is in the prompt
  auto c = run(1, 1, 0);
  // The reported logprob of token 4 is that of the unpenalized logits.
  const double z = std::log(std::exp(2.0) + std::exp(1.5) + std::exp(1.0) + 13.0);
  EXPECT_NEAR(c.tokens[1].logprob, 1.5 - z, 1e-6);
}

}  // namespace
}  // namespace ropeserve

namespace ropeserve {
namespace {

class Recorder : public EngineObserver {
 public:
  void OnRequestFinished(const RequestMetrics& m) override { requests.push_back(m); }
  void OnStep(const StepMetrics& m) override { steps.push_back(m); }
  std::vector<RequestMetrics> requests;
  std::vector<StepMetrics> steps;
};

TEST(Engine, ObserverGetsRequestTimingAndStepFigures) {
  CountingModel m(16);
  Engine e(Config(), m);
  Recorder rec;
  e.SetObserver(&rec);
  EngineRequest r;
  r.prompt = {1, 2, 3, 4, 5, 6};
  r.max_tokens = 5;
  r.ignore_eos = true;
  auto c = RunOne(e, r);
  ASSERT_EQ(c.finish_reason, "length");
  ASSERT_EQ(rec.requests.size(), 1u);
  const RequestMetrics& rm = rec.requests[0];
  EXPECT_EQ(rm.finish_reason, "length");
  EXPECT_EQ(rm.prompt_tokens, 6);
  EXPECT_EQ(rm.generated_tokens, 5);
  EXPECT_EQ(rm.inter_token_seconds.size(), 4u);
  EXPECT_GE(rm.queue_seconds, 0.0);
  EXPECT_GE(rm.ttft_seconds, rm.queue_seconds);
  EXPECT_GE(rm.e2e_seconds, rm.ttft_seconds);
  std::int64_t tokens = 0;
  for (const auto& s : rec.steps) tokens += s.scheduled_tokens;
  EXPECT_EQ(tokens, 6 + 4);  // the prompt, then one token per decode step
  EXPECT_EQ(rec.steps.back().running, 0);

  // A cancelled request is reported too, without a first token.
  EngineRequest never;
  never.prompt = {1, 2};
  never.max_tokens = 5;
  auto s = e.Submit(never);
  ASSERT_TRUE(s.ok());
  e.Cancel((*s)->id());
  e.RunUntilIdle();
  ASSERT_EQ(rec.requests.size(), 2u);
  EXPECT_EQ(rec.requests[1].finish_reason, "cancelled");
  EXPECT_EQ(rec.requests[1].ttft_seconds, -1);
}

}  // namespace
}  // namespace ropeserve
