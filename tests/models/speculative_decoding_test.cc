// Prompt-lookup speculative decoding on real (tiny, random) decoders of every
// family, float32, bfloat16 and int4, on the CPU and (scripts/gpu-check)
// on a CUDA device: greedy output equals non-speculative
// decoding token for token, alone, batched, preempted and with prefix-cache
// hits, and the verification rows reach the K/V cache exactly as decode
// steps do (a rejected draft's K/V is overwritten, never kept or cached).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cuda/kernels.h"
#include "server/engine/engine.h"
#include "server/models/decoder.h"
#include "server/models/device.h"
#include "server/runner/model_runner.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/common/offline.h"

namespace ropeserve {
namespace {

using testing::ScratchDir;
using Prompts = std::vector<std::vector<TokenId>>;

struct SpecCase {
  const char* name;
  const char* arch;
  DType dtype;
  Quantization quantization;
  // Steps of at most this many tokens; 0: up to the CPU int4 crossover
  // (at most 96). Int4 projections run the matrix-vector kernel up to the
  // ISA's crossover (CpuKernels::int4_kernel_max_rows: 48 with VNNI, every
  // count on AVX2) and bf16 panels beyond (other roundings), so an int4
  // model's tokens depend on the steps' sizes with or without speculation;
  // within the kernel's rows each row's arithmetic is its own, which is
  // what the int4 case holds.
  std::int64_t max_step_tokens = 96;
  // On the GPU (scripts/gpu-check; skipped where none is visible): its
  // kernels, cuBLAS and the sampler on the device. CUDA int4 steps of up to
  // cuda::kInt4GemvMaxRows rows run the matrix-vector kernel throughout.
  bool cuda = false;
};

class SpeculativeDecoding : public ::testing::TestWithParam<SpecCase> {
 protected:
  void SetUp() override {
    const SpecCase& v = GetParam();
    auto o = testing::TinyOptions(v.arch);
    o.max_position_embeddings = 512;
    o.intermediate_size = 160;  // whole groups of 32 for int4's down_proj
    const at::Device device = v.cuda ? at::Device("cuda:0") : at::Device(at::kCPU);
    if (v.cuda && !CheckDeviceUsable(device).ok()) GTEST_SKIP() << "no CUDA GPU visible";
    testing::MakeTinyCheckpoint(dir_.path(), o);
    auto m = DecoderModel::Load(dir_.path(), v.dtype, v.quantization, device);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
  }

  // Prompts that repeat part of themselves (what summaries and extracts
  // do), so that proposals exist from the first decode.
  Prompts Repeating(int n, std::uint64_t seed, const std::vector<TokenId>& prefix = {}) const {
    std::mt19937_64 rng(seed);
    const auto vocab = static_cast<std::uint64_t>(model_->config().vocab_size);
    Prompts out;
    for (int i = 0; i < n; ++i) {
      std::vector<TokenId> p = prefix;
      const int len = 4 + static_cast<int>(rng() % 20);
      for (int j = 0; j < len; ++j) p.push_back(static_cast<TokenId>(rng() % vocab));
      const int copy = 2 + static_cast<int>(rng() % (len - 2));
      p.insert(p.end(), p.end() - len, p.end() - len + copy);
      out.push_back(p);
    }
    return out;
  }

  struct Run {
    Prompts tokens;
    std::uint64_t drafts = 0, accepted = 0, preemptions = 0, prefix_hits = 0;
  };
  // The prompts through one engine of `num_blocks` blocks of 4, speculating
  // `k` tokens; `warm` runs first (for prefix-cache hits).
  Run Generate(const Prompts& prompts, int k, int num_blocks, std::int64_t max_tokens, const Prompts& warm = {}) const {
    ModelRunner runner(*model_, num_blocks, 4);
    EngineConfig c;
    c.num_blocks = num_blocks;
    c.block_size = 4;
    c.scheduler.max_model_len = 512;
    const std::int64_t step = GetParam().max_step_tokens;
    c.scheduler.max_num_batched_tokens =
        step > 0 ? step : std::min<std::int64_t>(96, cpu::ActiveKernels().int4_kernel_max_rows);
    c.scheduler.speculative.num_tokens = k;
    c.scheduler.speculative.min_ngram = 1;
    c.scheduler.speculative.max_ngram = 3;
    c.scheduler.speculative.disable_by_batch_size = 0;  // batched steps speculate too
    Engine engine(c, runner);
    auto submit = [&](const Prompts& ps) {
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (const auto& p : ps) {
        EngineRequest r;
        r.prompt = p;
        r.max_tokens = max_tokens;
        r.stop.ignore_eos = true;
        auto s = engine.Submit(r);
        EXPECT_TRUE(s.ok()) << s.status().ToString();
        streams.push_back(*s);
      }
      engine.RunUntilIdle();
      return streams;
    };
    submit(warm);
    Run out;
    for (const auto& s : submit(prompts)) {
      StreamChunk chunk = s->Next(std::chrono::seconds(0));
      EXPECT_TRUE(chunk.finished);
      out.tokens.emplace_back();
      for (const auto& t : chunk.tokens) out.tokens.back().push_back(t.id);
    }
    out.drafts = engine.stats().spec_draft_tokens;
    out.accepted = engine.stats().spec_accepted_tokens;
    out.preemptions = engine.stats().preemptions;
    out.prefix_hits = engine.stats().prefix_hits;
    EXPECT_EQ(engine.pool().num_free(), num_blocks);
    return out;
  }

  ScratchDir dir_;
  std::unique_ptr<DecoderModel> model_;
};

TEST_P(SpeculativeDecoding, GreedyOutputEqualsNonSpeculativeAloneAndBatched) {
  const Prompts prompts = Repeating(12, 1);
  const Run plain = Generate(prompts, 0, 256, 24);
  for (int k : {2, 5}) {
    const Run batched = Generate(prompts, k, 256, 24);
    EXPECT_GT(batched.drafts, 0u);
    EXPECT_GT(batched.accepted, 0u) << "no proposal was ever accepted: the test shows nothing";
    for (std::size_t i = 0; i < prompts.size(); ++i) ASSERT_EQ(batched.tokens[i], plain.tokens[i]) << i << " k " << k;
  }
  for (std::size_t i = 0; i < prompts.size(); i += 5)
    ASSERT_EQ(Generate({prompts[i]}, 4, 64, 24).tokens[0], plain.tokens[i]) << "alone " << i;
}

TEST_P(SpeculativeDecoding, PreemptedAndPrefixHitOutputsEqualNonSpeculative) {
  const Prompts prompts = Repeating(16, 2);
  const Run plain = Generate(prompts, 0, 256, 30);
  const Run tight = Generate(prompts, 4, 40, 30);  // 160 slots for 16 requests of up to 72 tokens
  EXPECT_GT(tight.preemptions, 0u);
  EXPECT_GT(tight.accepted, 0u);
  EXPECT_EQ(tight.tokens, plain.tokens);
  // A shared prefix cached by a speculating request, then hit by the rest.
  std::vector<TokenId> system(24);
  for (int i = 0; i < 24; ++i) system[i] = static_cast<TokenId>(10 + i % 8);
  const Prompts shared = Repeating(6, 3, system);
  const Prompts rest(shared.begin() + 1, shared.end());
  const Run cold = Generate(rest, 0, 256, 20);
  const Run hit = Generate(rest, 4, 256, 20, {shared[0]});
  EXPECT_GE(hit.prefix_hits, 5u * 6u);
  EXPECT_EQ(hit.tokens, cold.tokens);
}

INSTANTIATE_TEST_SUITE_P(Families, SpeculativeDecoding,
                         ::testing::Values(SpecCase{"qwen2_f32", "qwen2", DType::kF32, Quantization::kNone},
                                           SpecCase{"llama_f32", "llama", DType::kF32, Quantization::kNone},
                                           SpecCase{"qwen3_bf16", "qwen3", DType::kBF16, Quantization::kNone},
                                           SpecCase{"llama_int4_bf16", "llama", DType::kBF16, Quantization::kInt4, 0}
#ifdef ROPESERVE_HAVE_CUDA
                                           ,
                                           SpecCase{"qwen3_bf16_cuda", "qwen3", DType::kBF16, Quantization::kNone, 96,
                                                    true},
                                           SpecCase{"llama_int4_bf16_cuda", "llama", DType::kBF16, Quantization::kInt4,
                                                    cuda::kInt4GemvMaxRows, true}
#endif
                                           ),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ropeserve
