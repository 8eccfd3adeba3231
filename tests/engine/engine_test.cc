// The engine loop with a fake model (no LibTorch): stop conditions, stream
// contents, admission verdicts and executor failures.
#include "server/engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "server/engine/stream_waker.h"
#include "tests/engine/one_hot_logits.h"

namespace ropeserve {
namespace {

// Logits that make the next token (last token + 1) % vocab, by a wide margin.
class CountingModel : public testing::LogitsExecutor {
 public:
  explicit CountingModel(std::int64_t vocab) : vocab_(vocab) {}
  StatusOr<StepLogits> Forward(const StepPlan& plan) override {
    ++calls;
    if (fail_next) {
      fail_next = false;
      return Internal("device lost");
    }
    return testing::OneHotLogits(plan, vocab_, 20.0f, [&](const auto& s) { return (s.token_ids.back() + 1) % vocab_; });
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
  EXPECT_EQ(c.finish_reason, FinishReason::kLength);
  EXPECT_EQ(c.prompt_tokens, 2);

  r.prompt = {5};
  r.max_tokens = 10;
  c = RunOne(e, r);  // 6 7 8 9=eos
  EXPECT_EQ(Ids(c), (std::vector<TokenId>{6, 7, 8, 9}));
  EXPECT_EQ(c.finish_reason, FinishReason::kStop);

  r.stop.ignore_eos = true;
  r.stop.stop_token_ids = {11};
  c = RunOne(e, r);
  EXPECT_EQ(Ids(c), (std::vector<TokenId>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(c.finish_reason, FinishReason::kStop);

  r.stop.ignore_eos = false;
  r.stop.stop_token_ids = {};
  r.stop.min_tokens = 6;  // EOS at token 4 is ignored
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

TEST(Engine, SubmitNeverWaitsAndTheVerdictArrivesOnTheStream) {
  CountingModel m(20);
  Engine e(Config(), m);
  e.Start();  // the engine thread decides admission
  EngineRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 100;  // > max_model_len 64: refused by the scheduler
  auto refused = e.Submit(r);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ((*refused)->WaitAdmission().code(), ErrorCode::kInvalidArgument);
  StreamChunk c = (*refused)->Next(std::chrono::seconds(10));
  EXPECT_TRUE(c.finished);
  EXPECT_EQ(c.finish_reason, FinishReason::kRejected);
  EXPECT_EQ(c.error.code(), ErrorCode::kInvalidArgument);
  r.max_tokens = 3;
  auto admitted = e.Submit(r);
  ASSERT_TRUE(admitted.ok());
  EXPECT_TRUE((*admitted)->WaitAdmission().ok());
  e.Stop();
  // What Submit asserts at once (the request validator checked it before):
  // an unvalidated id, sampling value or min_tokens is a caller's bug, an
  // internal error that fails this request alone.
  r.max_tokens = 4;
  r.prompt = {25};  // outside the vocabulary
  EXPECT_EQ(e.Submit(r).status().code(), ErrorCode::kInternal);
  r.prompt = {1};
  r.sampling.top_p = 2;
  EXPECT_EQ(e.Submit(r).status().code(), ErrorCode::kInternal);
  r.sampling.top_p = 1;
  r.stop.min_tokens = 5;
  EXPECT_EQ(e.Submit(r).status().code(), ErrorCode::kInternal);
  r.stop.min_tokens = 4;  // valid: past the assertions, to the stopped engine's refusal
  EXPECT_EQ(e.Submit(r).status().code(), ErrorCode::kFailedPrecondition);
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
  EXPECT_EQ(c.finish_reason, FinishReason::kError);
  EXPECT_NE(c.error.message().find("device lost"), std::string::npos);
  // The engine keeps serving.
  StreamChunk ok = RunOne(e, r);
  EXPECT_EQ(ok.finish_reason, FinishReason::kLength);
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
  r.stop.ignore_eos = true;
  auto long_one = e.Submit(r);
  ASSERT_TRUE(long_one.ok());
  e.Stop();
  do {
    c = (*long_one)->Next(std::chrono::seconds(10));
  } while (!c.finished);
  EXPECT_TRUE(c.finish_reason == FinishReason::kCancelled || c.finish_reason == FinishReason::kLength);
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

// A fraction is taken of the memory the caller names (a CUDA worker's free
// device memory), and the cache never exceeds what the sequences can use.
TEST(KvCacheSizing, FractionOfTheGivenMemoryCappedAtWhatSequencesUse) {
  auto half = SizeKvCacheForEngine("0.5", 1024, 16, 64, 8, 1 << 20);  // 512 KiB of 1 MiB
  ASSERT_TRUE(half.ok()) << half.status().ToString();
  EXPECT_EQ(half->tokens, 512);
  auto capped = SizeKvCacheForEngine("0.9", 1024, 16, 64, 8, 1 << 30);  // 8 x 64 tokens (+ a block) at most
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->tokens, 64 * 8 + 16);
  // "auto": all of a device's budget, a quarter of the host's memory.
  auto device = SizeKvCacheForEngine("auto", 1024, 16, 64, 100, 1 << 20);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  EXPECT_EQ(device->tokens, 1024);
  const std::int64_t host = AvailableHostMemory();
  if (host > 0) {
    auto on_host = SizeKvCacheForEngine("auto", 1 << 20, 16, 16, 1 << 20);
    ASSERT_TRUE(on_host.ok()) << on_host.status().ToString();
    // 0.25 of MemAvailable, read again inside; it moves between the reads.
    EXPECT_NEAR(static_cast<double>(on_host->bytes), 0.25 * static_cast<double>(host),
                0.05 * static_cast<double>(host));
  }
  EXPECT_FALSE(SizeKvCacheForEngine("automatic", 1024, 16, 64, 8, 1 << 20).ok());
}

}  // namespace
}  // namespace ropeserve

namespace ropeserve {
namespace {

// Same logits every step: token 3 > 4 > 5 > the rest.
class FavoriteModel : public testing::LogitsExecutor {
 public:
  StatusOr<StepLogits> Forward(const StepPlan& plan) override {
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
  r.stop.ignore_eos = true;
  auto c = RunOne(e, r);
  ASSERT_EQ(c.finish_reason, FinishReason::kLength);
  ASSERT_EQ(rec.requests.size(), 1u);
  const RequestMetrics& rm = rec.requests[0];
  EXPECT_EQ(rm.finish_reason, FinishReason::kLength);
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
  EXPECT_EQ(rec.requests[1].finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(rec.requests[1].ttft_seconds, -1);
}

// ---- Encoder windows (extractive QA) inside the engine's steps ----

// Windows of `tokens` tokens each; counts how often each window ran.
// Thread-safe: the engine thread runs and fails it, the test reads it.
class FakeJob : public EncoderJob {
 public:
  FakeJob(std::size_t windows, std::int64_t tokens) : runs_(windows, 0), tokens_(tokens) {}
  std::size_t num_windows() const override { return runs_.size(); }
  std::int64_t window_tokens(std::size_t) const override { return tokens_; }
  bool cancelled() const override { return cancel; }
  void Fail(const Status& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = s;
  }
  void Ran(std::size_t window) {
    std::lock_guard<std::mutex> lock(mu_);
    ++runs_[window];
  }
  bool done() const {
    std::lock_guard<std::mutex> lock(mu_);
    return std::all_of(runs_.begin(), runs_.end(), [](int r) { return r == 1; });
  }
  std::vector<int> runs() const {
    std::lock_guard<std::mutex> lock(mu_);
    return runs_;
  }
  Status failure() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }
  std::atomic<bool> cancel{false};

 private:
  mutable std::mutex mu_;
  Status failed_;
  std::vector<int> runs_;
  std::int64_t tokens_;
};

class FakeRunner : public EncoderRunner {
 public:
  void Run(std::span<const EncoderItem> items) override {
    for (const auto& it : items) static_cast<FakeJob&>(*it.job).Ran(it.window);
    batches.push_back(items.size());
  }
  std::vector<std::size_t> batches;
};

TEST(EncoderQueue, TakesWindowsInArrivalOrderWithinTheBudget) {
  EncoderQueue q(/*max_jobs=*/3);
  auto a = std::make_shared<FakeJob>(3, 10), b = std::make_shared<FakeJob>(1, 50), c = std::make_shared<FakeJob>(2, 5);
  ASSERT_TRUE(q.Push(a).ok());
  ASSERT_TRUE(q.Push(b).ok());
  ASSERT_TRUE(q.Push(c).ok());
  EXPECT_EQ(q.Push(std::make_shared<FakeJob>(1, 1)).code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(q.pending_tokens(), 30 + 50 + 10);
  auto take = [&](std::int64_t budget) {
    std::vector<std::pair<EncoderJob*, std::size_t>> out;
    for (auto& it : q.Take(budget)) out.emplace_back(it.job.get(), it.window);
    return out;
  };
  using Items = std::vector<std::pair<EncoderJob*, std::size_t>>;
  EXPECT_EQ(take(25), (Items{{a.get(), 0}, {a.get(), 1}}));
  EXPECT_EQ(take(25), (Items{{a.get(), 2}}));  // b's window does not fit behind it
  EXPECT_EQ(take(25), (Items{{b.get(), 0}}));  // alone, a window may exceed the budget
  c->cancel = true;
  EXPECT_EQ(q.pending_tokens(), 0);
  EXPECT_TRUE(take(25).empty());
  // Closing fails what waits and refuses what comes.
  auto d = std::make_shared<FakeJob>(1, 4);
  ASSERT_TRUE(q.Push(d).ok());
  q.Close(Unavailable("stopped"));
  EXPECT_EQ(d->failure().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(q.Push(std::make_shared<FakeJob>(1, 1)).code(), ErrorCode::kUnavailable);
}

TEST(Engine, EncoderWindowsAndDecodesShareEveryStep) {
  CountingModel m(1000);
  EngineConfig config = Config();
  config.num_blocks = 64;
  config.scheduler.max_num_batched_tokens = 32;
  config.encoder_token_share = 0.5;
  Engine e(config, m);
  Recorder rec;
  e.SetObserver(&rec);
  EncoderQueue queue;
  FakeRunner runner;
  e.AttachEncoder(&queue, &runner);
  // A QA flood: 40 jobs of 3 windows of 12 tokens (1440 tokens, ~60 steps).
  std::vector<std::shared_ptr<FakeJob>> jobs;
  for (int j = 0; j < 40; ++j) {
    jobs.push_back(std::make_shared<FakeJob>(3, 12));
    ASSERT_TRUE(queue.Push(jobs.back()).ok());
  }
  // Four summaries: 20-token prompts, 30 tokens each.
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    EngineRequest r;
    r.prompt.assign(20, 100 + i);
    r.max_tokens = 30;
    r.stop.ignore_eos = true;
    auto s = e.Submit(r);
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  e.RunUntilIdle();
  for (auto& j : jobs) EXPECT_TRUE(j->done());
  for (auto& s : streams) EXPECT_EQ(s->Next(std::chrono::seconds(0)).tokens.size(), 30u);

  // Both kinds of work ran in every step until the summaries ended: the
  // prompts (80 tokens) took at most 16 tokens a step while windows waited,
  // then each step decoded all four and still ran two windows.
  std::size_t both = 0;
  while (both < rec.steps.size() && rec.steps[both].scheduled_tokens > 0) {
    EXPECT_GT(rec.steps[both].encoder_tokens, 0) << "step " << both;
    EXPECT_LE(rec.steps[both].scheduled_tokens + rec.steps[both].encoder_tokens, 32) << "step " << both;
    ++both;
  }
  EXPECT_EQ(both, 5u + 29u);  // 5 prefill steps (the last samples the first token), 29 decodes
  // Then the windows alone take the whole budget.
  ASSERT_GT(rec.steps.size(), both);
  for (std::size_t i = both; i + 1 < rec.steps.size(); ++i) {
    EXPECT_EQ(rec.steps[i].scheduled_tokens, 0);
    EXPECT_EQ(rec.steps[i].encoder_tokens, 24) << "step " << i;  // two windows: a third would exceed 32
  }
  EXPECT_EQ(e.stats().encoder_tokens.load(), 40u * 3 * 12);
  EXPECT_EQ(e.pool().num_free(), 64);
}

// Two encoder services (QA and embeddings) attached to one engine: each
// queue with work gets an even share of a step's budget, then what the
// others leave; a detached queue is no longer served.
TEST(Engine, SeveralEncoderQueuesShareTheSteps) {
  CountingModel m(1000);
  EngineConfig config = Config();
  config.scheduler.max_num_batched_tokens = 32;
  Engine e(config, m);
  Recorder rec;
  e.SetObserver(&rec);
  EncoderQueue qa, embed;
  FakeRunner qa_runner, embed_runner;
  e.AttachEncoder(&qa, &qa_runner);
  e.AttachEncoder(&embed, &embed_runner);
  std::vector<std::shared_ptr<FakeJob>> jobs;
  for (int j = 0; j < 5; ++j) {
    jobs.push_back(std::make_shared<FakeJob>(2, 8));
    ASSERT_TRUE(qa.Push(jobs.back()).ok());
    jobs.push_back(std::make_shared<FakeJob>(2, 8));
    ASSERT_TRUE(embed.Push(jobs.back()).ok());
  }
  e.RunUntilIdle();
  for (auto& j : jobs) EXPECT_TRUE(j->done());
  // 160 tokens in steps of 32, each half and half.
  ASSERT_EQ(rec.steps.size(), 5u);
  for (const auto& s : rec.steps) EXPECT_EQ(s.encoder_tokens, 32);
  EXPECT_EQ(qa_runner.batches, (std::vector<std::size_t>(5, 2)));
  EXPECT_EQ(embed_runner.batches, (std::vector<std::size_t>(5, 2)));

  // What one queue leaves of its share goes to the other.
  rec.steps.clear();
  qa_runner.batches.clear();
  embed_runner.batches.clear();
  jobs = {std::make_shared<FakeJob>(1, 8)};
  ASSERT_TRUE(qa.Push(jobs.back()).ok());
  for (int j = 0; j < 10; ++j) {
    jobs.push_back(std::make_shared<FakeJob>(2, 4));
    ASSERT_TRUE(embed.Push(jobs.back()).ok());
  }
  e.RunUntilIdle();
  for (auto& j : jobs) EXPECT_TRUE(j->done());
  ASSERT_EQ(rec.steps.size(), 3u);
  EXPECT_EQ(rec.steps[0].encoder_tokens, 32);  // 8 of QA, 16 + 8 of embeddings
  EXPECT_EQ(qa_runner.batches, (std::vector<std::size_t>{1}));
  EXPECT_EQ(embed_runner.batches, (std::vector<std::size_t>{6, 8, 6}));

  e.DetachEncoder(&qa);
  auto late = std::make_shared<FakeJob>(1, 8);
  ASSERT_TRUE(qa.Push(late).ok());
  e.RunUntilIdle();
  EXPECT_FALSE(late->done());
  EXPECT_EQ(qa_runner.batches.size(), 1u);
}

// Exceptions (what LibTorch throws on an allocation failure or a bug) in
// the forward, the encoder runner or a reader's callback fail the requests
// of that step, on the engine's own thread, and the engine goes on.
TEST(Engine, ExceptionsFailOnlyTheirStepAndTheEngineGoesOn) {
  class ThrowingModel : public CountingModel {
   public:
    using CountingModel::CountingModel;
    StatusOr<StepLogits> Forward(const StepPlan& plan) override {
      if (throw_next.exchange(false)) throw std::runtime_error("injected: out of memory");
      return CountingModel::Forward(plan);
    }
    std::atomic<bool> throw_next{false};
  } m(20);
  class ThrowingRunner : public FakeRunner {
   public:
    void Run(std::span<const EncoderItem> items) override {
      if (throw_next.exchange(false)) throw std::logic_error("injected: bad window");
      FakeRunner::Run(items);
    }
    std::atomic<bool> throw_next{false};
  } runner;
  Engine e(Config(), m);
  EngineRequest r;
  r.prompt = {1};
  r.max_tokens = 3;
  // A reader's callback throws (driven from this thread, so the callback is
  // in place before the first token): that request fails, not the engine.
  auto noisy = e.Submit(r);
  ASSERT_TRUE(noisy.ok());
  (*noisy)->SetNotify([] { throw std::runtime_error("injected: callback"); });
  e.RunUntilIdle();
  StreamChunk first = (*noisy)->Next(std::chrono::seconds(0));
  EXPECT_EQ(first.finish_reason, FinishReason::kError);
  EXPECT_NE(first.error.message().find("injected: callback"), std::string::npos) << first.error.ToString();
  EncoderQueue queue;
  e.AttachEncoder(&queue, &runner);
  e.Start();
  // The stream's end, with every token it produced.
  auto finish = [](const std::shared_ptr<RequestStream>& s) {
    StreamChunk all;
    do {
      StreamChunk c = s->Next(std::chrono::seconds(30));
      for (auto& t : c.tokens) all.tokens.push_back(t);
      if (c.finished) {
        c.tokens = std::move(all.tokens);
        return c;
      }
    } while (true);
  };
  // The forward throws: its request fails with the exception's message.
  m.throw_next = true;
  auto failed = e.Submit(r);
  ASSERT_TRUE(failed.ok());
  StreamChunk c = finish(*failed);
  EXPECT_EQ(c.finish_reason, FinishReason::kError);
  EXPECT_NE(c.error.message().find("injected: out of memory"), std::string::npos) << c.error.ToString();
  // The encoder runner throws: that job fails, the next one runs.
  runner.throw_next = true;
  auto bad_job = std::make_shared<FakeJob>(1, 4);
  ASSERT_TRUE(queue.Push(bad_job).ok());
  for (int i = 0; i < 1000 && bad_job->failure().ok(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_NE(bad_job->failure().message().find("injected: bad window"), std::string::npos)
      << bad_job->failure().ToString();
  auto good_job = std::make_shared<FakeJob>(1, 4);
  ASSERT_TRUE(queue.Push(good_job).ok());
  // And the engine still serves.
  auto ok = e.Submit(r);
  ASSERT_TRUE(ok.ok());
  c = finish(*ok);
  EXPECT_EQ(c.finish_reason, FinishReason::kLength);
  EXPECT_EQ(c.tokens.size(), 3u);
  for (int i = 0; i < 1000 && !good_job->done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(good_job->done());
  e.Stop();
  EXPECT_EQ(e.pool().num_free(), 32);
}

TEST(Engine, StoppingTheEngineFailsWaitingEncoderJobs) {
  CountingModel m(20);
  Engine e(Config(), m);
  EncoderQueue queue;
  // A runner that blocks the engine until released, so jobs stay queued.
  class Gate : public EncoderRunner {
   public:
    void Run(std::span<const EncoderItem> items) override {
      for (const auto& it : items) static_cast<FakeJob&>(*it.job).Ran(it.window);
      std::unique_lock<std::mutex> lock(mu);
      entered = true;
      cv.notify_all();
      cv.wait(lock, [&] { return open; });
    }
    std::mutex mu;
    std::condition_variable cv;
    bool entered = false, open = false;
  } gate;
  e.AttachEncoder(&queue, &gate);
  e.Start();
  auto first = std::make_shared<FakeJob>(1, 8), second = std::make_shared<FakeJob>(1, 8);
  ASSERT_TRUE(queue.Push(first).ok());
  {
    std::unique_lock<std::mutex> lock(gate.mu);
    ASSERT_TRUE(gate.cv.wait_for(lock, std::chrono::seconds(10), [&] { return gate.entered; }));
  }
  ASSERT_TRUE(queue.Push(second).ok());
  std::thread stopper([&] { e.Stop(); });
  {
    std::lock_guard<std::mutex> lock(gate.mu);
    gate.open = true;
  }
  gate.cv.notify_all();
  stopper.join();
  // The second job either ran (the engine had not seen the stop yet) or
  // failed; it is never left waiting.
  EXPECT_NE(second->done(), second->failure().code() == ErrorCode::kUnavailable) << second->failure().ToString();
  EXPECT_TRUE(first->done());
  // The engine closed the queue on its way out.
  EXPECT_EQ(queue.Push(std::make_shared<FakeJob>(1, 1)).code(), ErrorCode::kUnavailable);
}

// A stream's reader is woken by the StreamWaker once its data is in place:
// Push(..., false) wakes nobody, each stream handed over is woken once
// (repeats in a row collapse), and the destructor wakes what it still holds.
TEST(StreamWaker, WakesEachHandedStreamAfterItsData) {
  struct Seen {
    std::atomic<int> wakes{0}, tokens{0};
  };
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::unique_ptr<Seen>> seen;
  for (RequestId id = 1; id <= 3; ++id) {
    streams.push_back(std::make_shared<RequestStream>(id));
    seen.push_back(std::make_unique<Seen>());
    RequestStream* s = streams.back().get();
    Seen* v = seen.back().get();
    s->SetNotify([s, v] {
      v->tokens += static_cast<int>(s->Next(std::chrono::seconds(0)).tokens.size());
      ++v->wakes;
    });
  }
  {
    StreamWaker waker;
    for (auto& s : streams) s->Push(GeneratedToken{7, 0, {}}, /*wake=*/false);
    for (auto& v : seen) EXPECT_EQ(v->wakes, 0);
    waker.Add(streams[0]);
    waker.Add(streams[0]);
    waker.Add(streams[1]);
    waker.Flush();
    streams[2]->Push(GeneratedToken{8, 0, {}}, /*wake=*/false);
    waker.Add(streams[2]);  // not flushed: the destructor hands it over
  }
  EXPECT_EQ(seen[0]->wakes, 1);
  EXPECT_EQ(seen[1]->wakes, 1);
  EXPECT_EQ(seen[2]->wakes, 1);
  EXPECT_EQ(seen[0]->tokens, 1);
  EXPECT_EQ(seen[2]->tokens, 2);
  streams[0]->Push(GeneratedToken{9, 0, {}});  // the default wakes at once
  EXPECT_EQ(seen[0]->wakes, 2);
  EXPECT_EQ(seen[0]->tokens, 2);
}

// With its own thread the engine leaves the wakes to its StreamWaker:
// readers blocked in Next get every token and the end, none waits out its
// timeout (after a lost wake, Next returns the data when its 60 s pass).
TEST(Engine, ReadersOfTheEngineThreadAreWokenForEveryStep) {
  CountingModel m(20);
  EngineConfig config = Config();
  config.num_blocks = 256;
  config.scheduler.max_num_seqs = 16;
  Engine e(config, m);
  e.Start();
  std::vector<std::thread> readers;
  std::atomic<int> timeouts{0}, wrong{0};
  for (int i = 0; i < 16; ++i) {
    EngineRequest r;
    r.prompt = {static_cast<TokenId>(i % 8)};
    r.max_tokens = 40;
    r.stop.ignore_eos = true;
    auto s = e.Submit(r);
    ASSERT_TRUE(s.ok());
    readers.emplace_back([s = *s, first = r.prompt[0], &timeouts, &wrong] {
      std::vector<TokenId> ids;
      for (;;) {
        const auto asked = Clock::now();
        StreamChunk c = s->Next(std::chrono::seconds(60));
        if (Clock::now() - asked >= std::chrono::seconds(59)) ++timeouts;  // it waited out its timeout
        for (const auto& t : c.tokens) ids.push_back(t.id);
        if (c.finished) break;
      }
      for (std::size_t k = 0; k < ids.size(); ++k)
        if (ids[k] != static_cast<TokenId>((first + 1 + static_cast<TokenId>(k)) % 20)) ++wrong;
      if (ids.size() != 40) ++wrong;
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(timeouts, 0);
  EXPECT_EQ(wrong, 0);
}

// A callback that throws on the StreamWaker's thread fails its request at
// the request's next token, as it does on the engine's thread.
TEST(Engine, ACallbackThrowingOnTheWakersThreadFailsItsRequest) {
  class GatedModel : public CountingModel {
   public:
    using CountingModel::CountingModel;
    StatusOr<StepLogits> Forward(const StepPlan& plan) override {
      // From the second step on, after the reader's callback ran once (a
      // guard of 30 s), and slowly: the error is recorded microseconds
      // after the flag, and is looked for at each of the next tokens.
      for (int i = 0; calls >= 1 && !callback_ran && i < 30000; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (calls >= 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return CountingModel::Forward(plan);
    }
    std::atomic<bool> callback_ran{false};
  } m(20);
  Engine e(Config(), m);
  e.Start();
  EngineRequest r;
  r.prompt = {1};
  r.max_tokens = 60;
  r.stop.ignore_eos = true;
  auto s = e.Submit(r);
  ASSERT_TRUE(s.ok());
  (*s)->SetNotify([&m] {
    m.callback_ran = true;
    throw std::runtime_error("injected: callback");
  });
  StreamChunk all;
  for (;;) {
    StreamChunk c = (*s)->Next(std::chrono::seconds(60));
    for (auto& t : c.tokens) all.tokens.push_back(t);
    if (c.finished) {
      all.finish_reason = c.finish_reason;
      all.error = c.error;
      break;
    }
  }
  EXPECT_EQ(all.finish_reason, FinishReason::kError);
  EXPECT_NE(all.error.message().find("injected: callback"), std::string::npos) << all.error.ToString();
  EXPECT_LT(all.tokens.size(), 60u);
}

}  // namespace
}  // namespace ropeserve
