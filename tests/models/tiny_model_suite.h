// A test suite over one tiny random Qwen2 checkpoint (float32, CPU),
// written to a scratch directory and loaded once per suite: derive, and
// call Load(max_positions) from SetUpTestSuite.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "server/engine/engine.h"
#include "server/models/decoder.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/common/offline.h"

namespace ropeserve::testing {

class TinyModelSuite : public ::testing::Test {
 protected:
  static void Load(std::int64_t max_positions) {
    dir_ = new ScratchDir();
    auto o = TinyOptions("qwen2");
    o.max_position_embeddings = max_positions;
    MakeTinyCheckpoint(dir_->path(), o);
    auto m = DecoderModel::Load(dir_->path(), DType::kF32);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete dir_;
    model_ = nullptr;
    dir_ = nullptr;
  }

  // One request per prompt (prompt i wants max_tokens[i] tokens, EOS
  // ignored), submitted to `engine` together.
  static std::vector<std::shared_ptr<RequestStream>> SubmitAll(Engine& engine,
                                                               const std::vector<std::vector<TokenId>>& prompts,
                                                               const std::vector<std::int64_t>& max_tokens,
                                                               const SamplingParams& sampling) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      EngineRequest r;
      r.prompt = prompts[i];
      r.max_tokens = max_tokens[i];
      r.stop.ignore_eos = true;
      r.sampling = sampling;
      auto s = engine.Submit(r);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      streams.push_back(*s);
    }
    return streams;
  }
  // Random sampling (temperature 0.9, top-p 0.95) with a seed.
  static SamplingParams Seeded(std::uint64_t seed) {
    SamplingParams p;
    p.temperature = 0.9;
    p.top_p = 0.95;
    p.seed = seed;
    return p;
  }
  // The finished streams' tokens and their logprobs.
  struct Outputs {
    std::vector<std::vector<TokenId>> tokens;
    std::vector<std::vector<double>> logprobs;
  };
  static Outputs Collect(const std::vector<std::shared_ptr<RequestStream>>& streams) {
    Outputs out;
    for (const auto& s : streams) {
      StreamChunk c = s->Next(std::chrono::seconds(0));
      EXPECT_TRUE(c.finished);
      out.tokens.emplace_back();
      out.logprobs.emplace_back();
      for (const auto& t : c.tokens) {
        out.tokens.back().push_back(t.id);
        out.logprobs.back().push_back(t.logprob);
      }
    }
    return out;
  }

  static inline ScratchDir* dir_ = nullptr;
  static inline DecoderModel* model_ = nullptr;
};

}  // namespace ropeserve::testing
