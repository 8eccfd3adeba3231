// The runner's persistent step buffers and padded decode buckets on the
// CPU: padding a decode step to its bucket changes no request's tokens (and
// its logprobs only by the rounding of GEMMs of another row count), the
// buffers keep their addresses from step to step (what captured CUDA graphs
// read), and a step larger than the buffers grows them without changing
// any result.
#include "server/runner/model_runner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <random>

#include "server/engine/engine.h"
#include "server/models/decoder.h"
#include "server/models/device.h"
#include "server/sampler/logits_processors.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/common/float_bounds.h"
#include "tests/common/offline.h"
#include "tests/engine/mask_processor.h"
#include "tests/models/reference_decoder.h"
#include "tests/models/tiny_model_suite.h"

namespace ropeserve {
namespace {

using testing::ScratchDir;

constexpr std::int64_t kBatchTokens = 96;
constexpr int kMaxSeqs = 64;

class ModelRunnerTest : public testing::TinyModelSuite {
 protected:
  static void SetUpTestSuite() { Load(256); }
  static void ExpectDeviceSamplingEqualsHost(const PagedModel& model, SamplerPlacement where, bool graphs = false);
  static void ExpectHostTierRoundTrip(const PagedModel& model, double logprob_bound, const std::string& directory = "");

  static EngineConfig Config(int num_blocks = 512) {
    EngineConfig c;
    c.num_blocks = num_blocks;
    c.block_size = 4;
    c.scheduler.max_model_len = 256;
    c.scheduler.max_num_seqs = kMaxSeqs;
    c.scheduler.max_num_batched_tokens = kBatchTokens;
    return c;
  }

  // Requests of 1-40 prompt tokens wanting 2-17 tokens each, so that they
  // finish at different steps and the decode batch shrinks through several
  // buckets.
  struct Job {
    std::vector<TokenId> prompt;
    std::int64_t max_tokens = 0;
  };
  static std::vector<Job> Jobs(int n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<Job> out;
    for (int i = 0; i < n; ++i) {
      Job j;
      const int len = 1 + static_cast<int>(rng() % 40);
      for (int k = 0; k < len; ++k) j.prompt.push_back(static_cast<TokenId>(rng() % 297));
      j.max_tokens = 2 + static_cast<std::int64_t>(rng() % 16);
      out.push_back(std::move(j));
    }
    return out;
  }

  struct Result : Outputs {
    std::uint64_t preemptions = 0;
  };
  // Every job submitted at once, then one engine step at a time; `each_step`
  // runs after every step.
  static Result Run(ModelRunner& runner, const std::vector<Job>& jobs, SamplingParams sampling = {},
                    const std::function<void()>& each_step = {}, int num_blocks = 512) {
    Engine engine(Config(num_blocks), runner);
    std::vector<std::vector<TokenId>> prompts;
    std::vector<std::int64_t> max_tokens;
    for (const auto& j : jobs) {
      prompts.push_back(j.prompt);
      max_tokens.push_back(j.max_tokens);
    }
    const auto streams = SubmitAll(engine, prompts, max_tokens, sampling);
    while (engine.RunOnce())
      if (each_step) each_step();
    Result out;
    static_cast<Outputs&>(out) = Collect(streams);
    out.preemptions = engine.stats().preemptions;
    return out;
  }

  // Same tokens; logprobs within the rounding of GEMMs over other row counts.
  static void ExpectSame(const Result& a, const Result& b) {
    ASSERT_EQ(a.tokens, b.tokens);
    const ModelConfig& c = model_->config();
    const double bound = testing::RoundingBound(std::max<std::int64_t>({c.hidden_size, c.intermediate_size, 60}),
                                                c.num_hidden_layers, 20.0);  // the tiny models' logits are within +-20
    for (std::size_t i = 0; i < a.logprobs.size(); ++i)
      for (std::size_t k = 0; k < a.logprobs[i].size(); ++k)
        EXPECT_NEAR(a.logprobs[i][k], b.logprobs[i][k], bound) << "request " << i << " token " << k;
  }

  static RunnerOptions Options(bool pad) {
    RunnerOptions o;
    o.max_num_batched_tokens = kBatchTokens;
    o.max_num_seqs = kMaxSeqs;
    o.pad_decode = pad;
    return o;
  }
};

TEST(DecodeBuckets, PowersOfTwoToEightThenStepsOfEightToTheLimit) {
  EXPECT_EQ(ModelRunner::DecodeBuckets(64), (std::vector<std::int64_t>{1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64}));
  EXPECT_EQ(ModelRunner::DecodeBuckets(20), (std::vector<std::int64_t>{1, 2, 4, 8, 16, 20}));
  EXPECT_EQ(ModelRunner::DecodeBuckets(3), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(ModelRunner::DecodeBuckets(1), (std::vector<std::int64_t>{1}));
}

// The block tables' width, which the worker also sizes the graphs'
// workspace from: --max-model-len in whole blocks, at most the model's
// positions; 0 = the model's.
TEST(RunnerContextBlocks, MaxModelLenInWholeBlocksCappedByTheModel) {
  EXPECT_EQ(RunnerContextBlocks(2048, 0, 16), 128);
  EXPECT_EQ(RunnerContextBlocks(2048, 100, 16), 7);
  EXPECT_EQ(RunnerContextBlocks(2048, 112, 16), 7);
  EXPECT_EQ(RunnerContextBlocks(2048, 4096, 16), 128);
  EXPECT_EQ(RunnerContextBlocks(100, 0, 16), 7);
  EXPECT_EQ(RunnerContextBlocks(100, 0, 1), 100);
}

TEST_F(ModelRunnerTest, PaddedDecodeEqualsUnpadded) {
  const auto jobs = Jobs(27, 11);
  ModelRunner plain(*model_, 512, 4, Options(false));
  ModelRunner padded(*model_, 512, 4, Options(true));
  const Result want = Run(plain, jobs);
  const Result got = Run(padded, jobs);
  ExpectSame(got, want);
  EXPECT_EQ(plain.stats().padded_steps, 0u);
  // 27 decodes pad to 32, and shrinking batches to their buckets.
  EXPECT_GT(padded.stats().padded_steps, 5u);
  EXPECT_GT(padded.stats().padding_rows, 0u);
  EXPECT_EQ(padded.stats().steps, plain.stats().steps);
}

// The same through the gather-based reference attention, whose oracle
// checks every step's attention tensors against the host's lengths and
// whose cache write skips the fillers' slots as the kernels' does.
TEST_F(ModelRunnerTest, PaddedDecodeEqualsUnpaddedOnTheReferenceAttention) {
  const auto jobs = Jobs(11, 12);
  const testing::ReferenceAttentionModel reference(*model_);
  ModelRunner plain(reference, 512, 4, Options(false));
  ModelRunner padded(reference, 512, 4, Options(true));
  ExpectSame(Run(padded, jobs), Run(plain, jobs));
  EXPECT_GT(padded.stats().padding_rows, 0u);
}

TEST_F(ModelRunnerTest, SeededSamplingIsTheSamePadded) {
  const auto jobs = Jobs(13, 13);
  SamplingParams p = Seeded(77);
  ModelRunner plain(*model_, 512, 4, Options(false));
  ModelRunner padded(*model_, 512, 4, Options(true));
  ExpectSame(Run(padded, jobs, p), Run(plain, jobs, p));
  EXPECT_GT(padded.stats().padding_rows, 0u);
}

// Sampling by DeviceSampling (`where`) gives every token, logprob and top
// logprob the host sampler gives, in a batch and with preemptions: greedy
// rows with penalties, logit bias, masks and top logprobs (every fifth
// request samples at random: the host's on the CPU, the kernel's on a GPU,
// where its tokens differ and are not compared).
void ModelRunnerTest::ExpectDeviceSamplingEqualsHost(const PagedModel& model, SamplerPlacement where, bool graphs) {
  const auto jobs = Jobs(20, 21);
  const bool gpu = model.device().is_cuda();
  struct Got {
    std::vector<std::vector<GeneratedToken>> tokens;
    std::uint64_t preemptions = 0;
    std::uint64_t device_draws = 0;
  };
  auto run = [&](SamplerPlacement placement, int num_blocks) {
    RunnerOptions o = Options(true);
    o.sampling = placement;
    o.cuda_graphs = graphs;  // both runs: logits from the same captured kernels
    ModelRunner runner(model, num_blocks, 4, o);
    if (o.cuda_graphs) {
      const Status captured = runner.CaptureDecodeGraphs();
      EXPECT_TRUE(captured.ok()) << captured.ToString();
      EXPECT_EQ(runner.graph_reduction(), "the rows' reduction inside them");
    }
    Engine engine(Config(num_blocks), runner);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      EngineRequest r;
      r.prompt = jobs[i].prompt;
      r.max_tokens = jobs[i].max_tokens;
      r.stop.ignore_eos = true;
      switch (i % 5) {
        case 1:
          r.sampling.repetition_penalty = 1.3;
          r.sampling.frequency_penalty = 0.5;
          break;
        case 2:
          r.processor = std::make_shared<LogitBias>(std::vector<std::pair<std::int64_t, float>>{{5, 4.f}, {17, -3.f}});
          r.sampling.presence_penalty = 0.8;
          r.top_logprobs = 3;
          break;
        case 3:
          r.processor = testing::MaskProcessor::EvenOnly(/*as_allow_list=*/false, 400);
          r.top_logprobs = 1;
          break;
        case 4:
          r.sampling = Seeded(40 + i);
          break;
        default:
          break;
      }
      auto s = engine.Submit(r);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      streams.push_back(*s);
    }
    while (engine.RunOnce()) {
    }
    Got out;
    out.preemptions = engine.stats().preemptions;
    out.device_draws = runner.stats().sampler.device_draws;
    if (o.cuda_graphs) {
      EXPECT_GT(runner.stats().graph_replays, 0u);
    }
    for (const auto& s : streams) {
      StreamChunk c = s->Next(std::chrono::seconds(0));
      EXPECT_TRUE(c.finished);
      out.tokens.push_back(c.tokens);
    }
    return out;
  };
  // A float32 log-sum-exp of V terms: the sum's relative error is within
  // gamma_{V+2} (V additions, exp's rounding), hence the log's absolute
  // error; then two roundings of magnitudes up to |logprob| + |logit|, the
  // tiny model's logits far below 64.
  const auto vocab = static_cast<std::int64_t>(model.config().vocab_size);
  auto lse_bound = [&](double logprob) {
    return testing::Gamma(vocab + 2, testing::kF32Roundoff) + 2 * testing::kF32Roundoff * (std::abs(logprob) + 64);
  };
  for (int num_blocks : {512, 40}) {  // 40: 160 slots for 20 requests of up to 57 tokens
    const Got host = run(SamplerPlacement::kHost, num_blocks);
    const Got device = run(where, num_blocks);
    if (num_blocks == 40) {
      EXPECT_GT(device.preemptions, 0u);
    }
    EXPECT_EQ(host.device_draws, 0u);
    // Every token was drawn there but the random requests' on the CPU and
    // the plain greedy requests' in steps of such requests alone (their
    // summary's argmax is the token: no draw).
    std::uint64_t processed = 0, plain = 0;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      if (i % 5 == 0) {
        plain += host.tokens[i].size();
      } else if (gpu || i % 5 != 4) {
        processed += host.tokens[i].size();
      }
    }
    EXPECT_GE(device.device_draws, processed);
    EXPECT_LE(device.device_draws, processed + plain);
    ASSERT_EQ(device.tokens.size(), host.tokens.size());
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      ASSERT_EQ(device.tokens[i].size(), host.tokens[i].size()) << "request " << i;
      if (gpu && i % 5 == 4) continue;
      for (std::size_t k = 0; k < host.tokens[i].size(); ++k) {
        const GeneratedToken &a = device.tokens[i][k], &b = host.tokens[i][k];
        EXPECT_EQ(a.id, b.id) << "request " << i << " token " << k;
        if (!gpu) {  // the same tensor code on the same logits
          EXPECT_EQ(a.logprob, b.logprob) << "request " << i << " token " << k;
          EXPECT_EQ(a.top_logprobs, b.top_logprobs) << "request " << i << " token " << k;
        } else {  // the same logits, log-sum-exp in float32 on the GPU vs the host's
          ASSERT_EQ(a.top_logprobs.size(), b.top_logprobs.size());
          EXPECT_NEAR(a.logprob, b.logprob, lse_bound(b.logprob)) << "request " << i << " token " << k;
          for (std::size_t t = 0; t < a.top_logprobs.size(); ++t) {
            EXPECT_EQ(a.top_logprobs[t].first, b.top_logprobs[t].first) << "request " << i << " token " << k;
            EXPECT_NEAR(a.top_logprobs[t].second, b.top_logprobs[t].second, lse_bound(b.top_logprobs[t].second));
          }
        }
        if (i % 5 == 3) {
          EXPECT_EQ(a.id % 2, 0);
        }
      }
    }
  }
}

TEST_F(ModelRunnerTest, DeviceSamplingEqualsTheHostSampler) {
  // On the CPU, kDevice draws the greedy rows and leaves the random ones.
  ExpectDeviceSamplingEqualsHost(*model_, SamplerPlacement::kDevice);
}

TEST_F(ModelRunnerTest, StepBuffersKeepTheirAddressesAcrossSteps) {
  const auto jobs = Jobs(40, 14);
  ModelRunner runner(*model_, 512, 4, Options(true));
  const std::vector<const void*> first = runner.BufferAddresses();
  ASSERT_EQ(first.size(), 3u);
  int steps = 0;
  Run(runner, jobs, {}, [&] {
    ++steps;
    ASSERT_EQ(runner.BufferAddresses(), first) << "after step " << steps;
  });
  EXPECT_GT(steps, 10);
  EXPECT_EQ(runner.stats().buffer_growths, 0u);
}

// The phase times (RunnerStats::*_ns) cover each step once: every phase
// takes time, and together they fit inside the wall time of the run.
TEST_F(ModelRunnerTest, PhaseTimesAddUpWithinTheRun) {
  RunnerOptions o = Options(true);
  o.time_phases = true;
  ModelRunner runner(*model_, 512, 4, o);
  const auto t0 = std::chrono::steady_clock::now();
  Run(runner, Jobs(12, 15));
  const auto wall = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  const RunnerStats& st = runner.stats();
  EXPECT_GT(st.steps, 10u);
  EXPECT_GT(st.prepare_ns, 0u);
  EXPECT_GT(st.forward_ns, 0u);
  EXPECT_GT(st.reduce_ns, 0u);
  EXPECT_LE(st.prepare_ns + st.forward_ns + st.reduce_ns, wall);
  // (No comparison between the phases: on the tiny test model they take
  // microseconds each, and which is longer depends on what else the
  // machine runs: a busy neighbour made prepare 2x the forward once.)
}

// A runner told of smaller limits than the scheduler's grows its buffers
// on the first larger step (new addresses, counted) and computes the same.
TEST_F(ModelRunnerTest, AStepLargerThanTheBuffersGrowsThem) {
  const auto jobs = Jobs(9, 15);
  RunnerOptions small = Options(true);
  small.max_num_batched_tokens = 4;
  small.max_num_seqs = 2;
  ModelRunner grown(*model_, 512, 4, small);
  const std::vector<const void*> before = grown.BufferAddresses();
  ModelRunner plain(*model_, 512, 4, Options(false));
  ExpectSame(Run(grown, jobs), Run(plain, jobs));
  EXPECT_GT(grown.stats().buffer_growths, 0u);
  EXPECT_NE(grown.BufferAddresses(), before);
}

// The block tables are --max-model-len wide (under CUDA graphs, the context
// each captured step attends up to), not max_position_embeddings: requests
// within it run as before, and a table that would outgrow it is an error,
// never a write past its row.
TEST_F(ModelRunnerTest, BlockTablesAreAsWideAsMaxModelLen) {
  const auto jobs = Jobs(9, 16);  // at most 40 + 17 tokens
  RunnerOptions bounded = Options(true);
  bounded.max_model_len = 60;
  ModelRunner narrow(*model_, 512, 4, bounded);
  ModelRunner plain(*model_, 512, 4, Options(false));
  ExpectSame(Run(narrow, jobs), Run(plain, jobs));

  bounded.max_model_len = 8;  // two blocks of 4
  ModelRunner tight(*model_, 512, 4, bounded);
  StepPlan plan;
  plan.block_size = 4;
  SamplingSpec greedy;
  greedy.id = 1;
  plan.added.push_back(greedy);
  ScheduledSequence s;
  s.request_id = 1;
  s.token_ids = std::vector<TokenId>(12, 5);
  s.reset_blocks = true;
  s.new_blocks = {0, 1, 2};
  s.needs_logits = true;
  plan.sequences.push_back(s);
  const auto refused = tight.Execute(plan);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("outgrew"), std::string::npos) << refused.status().message();
}

// The host KV tier through the runner's own copies: a document's blocks,
// evicted from a 24-block cache by other prompts (which then hold those
// block ids), come back from the tier, and the question after them decodes
// as it did on a prefix-cache hit before the eviction: the same tokens, and
// logprobs within `logprob_bound` (0 where the same K/V bits in the same
// shapes give the same sums).
void ModelRunnerTest::ExpectHostTierRoundTrip(const PagedModel& model, double logprob_bound,
                                              const std::string& directory) {
  constexpr int kBlocks = 24, kSlots = 64;
  ModelRunner runner(model, kBlocks, 4, Options(false));
  runner.AllocateOffloadTier(kSlots, directory);
  EngineConfig config = Config(kBlocks);
  config.kv_offload_blocks = kSlots;
  config.kv_offload_mover = &runner;
  Engine engine(config, runner);
  auto ask = [&](const std::vector<TokenId>& prompt, std::int64_t max_tokens) {
    const auto streams = SubmitAll(engine, {prompt}, {max_tokens}, SamplingParams{});
    while (engine.RunOnce()) {
    }
    return Collect(streams);
  };
  std::vector<TokenId> question;
  for (int i = 0; i < 46; ++i) question.push_back(static_cast<TokenId>((i * 37) % 297));  // 40 of a document, 6 more
  ask(question, 4);
  const Outputs hit = ask(question, 4);
  ASSERT_GE(engine.stats().prefix_hits.load(), 1u);
  for (int f = 0; f < 3; ++f) {  // 3 x 11 blocks: every block id is reused
    std::vector<TokenId> filler;
    for (int i = 0; i < 40; ++i) filler.push_back(static_cast<TokenId>((i * 11 + f * 101 + 5) % 297));
    ask(filler, 2);
  }
  ASSERT_GE(engine.stats().offload_saved.load(), 11u);
  const std::uint64_t loaded = engine.stats().offload_loaded.load();
  const Outputs again = ask(question, 4);
  EXPECT_GE(engine.stats().offload_loaded.load(), loaded + 10) << "the document came back from the tier";
  EXPECT_EQ(engine.stats().offload_failed_copies.load(), 0u);
  ASSERT_EQ(again.tokens, hit.tokens);
  for (std::size_t k = 0; k < hit.logprobs[0].size(); ++k)
    EXPECT_NEAR(again.logprobs[0][k], hit.logprobs[0][k], logprob_bound) << "token " << k;
}

TEST_F(ModelRunnerTest, HostTierRoundTripEqualsThePrefixCacheHit) { ExpectHostTierRoundTrip(*model_, 0.0); }

// --kv-offload-path: the tier's slots in a file (mapped, unlinked at once:
// the directory stays empty); a directory that is not one is an error
// that says so.
TEST_F(ModelRunnerTest, HostTierInAFileRoundTrip) {
  ScratchDir dir;
  ExpectHostTierRoundTrip(*model_, 0.0, dir.path());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  ModelRunner runner(*model_, 24, 4, Options(false));
  try {
    runner.AllocateOffloadTier(8, dir.path() + "/missing");
    ADD_FAILURE() << "a missing directory was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create a file in " + dir.path() + "/missing"), std::string::npos)
        << e.what();
  }
}

#ifdef ROPESERVE_HAVE_CUDA
// On a GPU: the same through the tier's own stream and pinned memory; the
// logprobs within bf16 rounding (cuBLAS may pick another algorithm on a
// later call; the tokens must agree).
TEST_F(ModelRunnerTest, CudaHostTierRoundTrip) {
  const at::Device cuda("cuda:0");
  if (!CheckDeviceUsable(cuda).ok()) GTEST_SKIP() << "no CUDA GPU visible";
  auto m = DecoderModel::Load(dir_->path(), DType::kBF16, Quantization::kNone, cuda);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = (*m)->config();
  ExpectHostTierRoundTrip(**m, testing::RoundingBound(std::max<std::int64_t>({c.hidden_size, c.intermediate_size, 60}),
                                                      c.num_hidden_layers, 20.0, testing::kBF16Roundoff));
}

// On a GPU (scripts/gpu-check): decode steps replayed from the captured
// graphs give what the same padded steps give eagerly.
TEST_F(ModelRunnerTest, CudaGraphReplayEqualsEager) {
  const at::Device cuda("cuda:0");
  if (!CheckDeviceUsable(cuda).ok()) GTEST_SKIP() << "no CUDA GPU visible";
  auto m = DecoderModel::Load(dir_->path(), DType::kBF16, Quantization::kNone, cuda);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*m)->CanCaptureGraphs());
  const auto jobs = Jobs(27, 16);
  RunnerOptions eager = Options(true), graphs = Options(true);
  graphs.cuda_graphs = true;
  ModelRunner a(**m, 512, 4, eager);
  ModelRunner b(**m, 512, 4, graphs);
  const Status captured = b.CaptureDecodeGraphs();
  ASSERT_TRUE(captured.ok()) << captured.ToString();
  EXPECT_EQ(b.captured_graphs(), ModelRunner::DecodeBuckets(kMaxSeqs).size());
  EXPECT_EQ(b.graph_reduction(), "the rows' reduction inside them");
  const Result want = Run(a, jobs), got = Run(b, jobs);
  EXPECT_GT(b.stats().graph_replays, 5u);
  EXPECT_EQ(a.stats().graph_replays, 0u);
  // Greedy rows alone: every replayed step's tokens came from the graph's
  // own copy back, none of the eager runner's.
  EXPECT_EQ(b.stats().sampler.reduced_with_forward, b.stats().graph_replays);
  EXPECT_EQ(a.stats().sampler.reduced_with_forward, 0u);
  ASSERT_EQ(got.tokens, want.tokens);
  const ModelConfig& c = (*m)->config();
  const double bound = testing::RoundingBound(std::max<std::int64_t>({c.hidden_size, c.intermediate_size, 60}),
                                              c.num_hidden_layers, 20.0, testing::kBF16Roundoff);
  for (std::size_t i = 0; i < got.logprobs.size(); ++i)
    for (std::size_t k = 0; k < got.logprobs[i].size(); ++k)
      EXPECT_NEAR(got.logprobs[i][k], want.logprobs[i][k], bound) << "request " << i << " token " << k;
}

// On a GPU (kAuto samples there): penalties, logit bias, masks, top
// logprobs and the argmax on the device equal the host sampler's on the
// same logits.
TEST_F(ModelRunnerTest, CudaDeviceSamplingEqualsTheHostSampler) {
  const at::Device cuda("cuda:0");
  if (!CheckDeviceUsable(cuda).ok()) GTEST_SKIP() << "no CUDA GPU visible";
  auto m = DecoderModel::Load(dir_->path(), DType::kBF16, Quantization::kNone, cuda);  // CUDA workers are 16-bit
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ExpectDeviceSamplingEqualsHost(**m, SamplerPlacement::kAuto);
}

// The same with the decode steps replayed from CUDA graphs in both runs,
// which end with the rows' reduction (Sampler's ReducedRows): the device's
// draws read the graph's summary of the padded rows, the host sampler its
// copy back.
TEST_F(ModelRunnerTest, CudaDeviceSamplingUnderGraphsEqualsTheHostSampler) {
  const at::Device cuda("cuda:0");
  if (!CheckDeviceUsable(cuda).ok()) GTEST_SKIP() << "no CUDA GPU visible";
  auto m = DecoderModel::Load(dir_->path(), DType::kBF16, Quantization::kNone, cuda);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ExpectDeviceSamplingEqualsHost(**m, SamplerPlacement::kAuto, /*graphs=*/true);
}

// On a GPU: plain random sampling is drawn on the device, keyed by (seed,
// tokens so far), so a seeded request's tokens are the same alone, in a
// batch and when preempted (a KV cache too small for the batch).
TEST_F(ModelRunnerTest, CudaSeededDrawsAreTheSameAloneBatchedAndPreempted) {
  const at::Device cuda("cuda:0");
  if (!CheckDeviceUsable(cuda).ok()) GTEST_SKIP() << "no CUDA GPU visible";
  auto m = DecoderModel::Load(dir_->path(), DType::kBF16, Quantization::kNone, cuda);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const auto jobs = Jobs(16, 17);
  SamplingParams p = Seeded(99);
  ModelRunner batched_runner(**m, 512, 4, Options(false));
  const Result batched = Run(batched_runner, jobs, p);
  ModelRunner tight_runner(**m, 40, 4, Options(false));  // 160 slots for 16 requests of up to 57 tokens
  const Result tight = Run(tight_runner, jobs, p, {}, 40);
  EXPECT_GT(tight.preemptions, 0u);
  EXPECT_EQ(tight.tokens, batched.tokens);
  for (std::size_t i = 0; i < jobs.size(); i += 3) {
    ModelRunner alone_runner(**m, 512, 4, Options(false));
    EXPECT_EQ(Run(alone_runner, {jobs[i]}, p).tokens[0], batched.tokens[i]) << "request " << i;
  }
  // Not all greedy: the draws differ from the argmax somewhere.
  p.temperature = 0;
  ModelRunner greedy_runner(**m, 512, 4, Options(false));
  EXPECT_NE(Run(greedy_runner, jobs, p).tokens, batched.tokens);
}
#endif

}  // namespace
}  // namespace ropeserve
