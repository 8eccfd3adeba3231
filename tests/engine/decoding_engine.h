// An engine over ConstantTokenModel with one greedy decode running: what
// the encoder tests (QA, embeddings, classifiers) run their requests beside,
// so that their windows go through the engine's steps next to a decode.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "server/engine/engine.h"
#include "tests/engine/one_hot_logits.h"

namespace ropeserve::testing {

class DecodingEngine {
 public:
  // Steps of at most `step_tokens` tokens; the decode asks for
  // `decode_tokens` tokens (EOS ignored).
  explicit DecodingEngine(std::int64_t step_tokens, std::int64_t decode_tokens = 20) {
    EngineConfig ec;
    ec.num_blocks = 64;
    ec.block_size = 4;
    ec.scheduler.max_model_len = 64;
    ec.scheduler.max_num_batched_tokens = step_tokens;
    engine_ = std::make_unique<Engine>(ec, model_);
    engine_->Start();
    EngineRequest r;
    r.prompt = {2, 3, 4};
    r.max_tokens = decode_tokens;
    r.stop.ignore_eos = true;
    auto stream = engine_->Submit(r);
    EXPECT_TRUE(stream.ok()) << stream.status().ToString();
    if (stream.ok()) stream_ = std::move(*stream);
  }
  ~DecodingEngine() { engine_->Stop(); }

  Engine& engine() { return *engine_; }
  // Reads the decode to its end; the tokens it produced.
  std::size_t FinishDecode() {
    std::size_t tokens = 0;
    if (!stream_) return tokens;
    for (StreamChunk c; !c.finished;) {
      c = stream_->Next(std::chrono::seconds(30));
      tokens += c.tokens.size();
    }
    return tokens;
  }

 private:
  ConstantTokenModel model_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<RequestStream> stream_;
};

}  // namespace ropeserve::testing
