// The decoder's worker (server/serving/decoder_worker.h): serve's and the
// offline engine's services are built by the same function, so the same
// options give the same cache, engine config and outputs; the options are
// checked against the model once; the host tier and the fault injector
// sit where serve puts them.
#include "server/serving/decoder_worker.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "server/models/decoder.h"
#include "server/serving/service_factory.h"
#include "tests/common/validated.h"
#include "tests/models/tiny_model_suite.h"

namespace ropeserve {
namespace {

// A tiny qwen2 checkpoint of 64 positions, loaded once.
class DecoderWorkerTest : public testing::TinyModelSuite {
 protected:
  static void SetUpTestSuite() { Load(64); }
  static service::EngineOptions Options() {
    service::EngineOptions o;
    o.block_size = 4;
    o.scheduler.max_num_seqs = 3;
    o.scheduler.max_num_batched_tokens = 32;
    return o;
  }
};

TEST_F(DecoderWorkerTest, ResolveFillsTheModelsLengthAndRefusesWhatTheModelCannotDo) {
  auto resolved = ResolveEngineOptions(*model_, Options());
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  EXPECT_EQ(resolved->scheduler.max_model_len, 64);

  auto too_long = Options();
  too_long.scheduler.max_model_len = 65;
  EXPECT_EQ(ResolveEngineOptions(*model_, too_long).status().code(), ErrorCode::kInvalidArgument);
  auto no_block = Options();
  no_block.block_size = 0;
  EXPECT_EQ(ResolveEngineOptions(*model_, no_block).status().code(), ErrorCode::kInvalidArgument);
  auto huge_block = Options();
  huge_block.block_size = 1025;
  EXPECT_EQ(ResolveEngineOptions(*model_, huge_block).status().code(), ErrorCode::kInvalidArgument);
  auto share = Options();
  share.qa_token_share = 1.0;
  EXPECT_EQ(ResolveEngineOptions(*model_, share).status().code(), ErrorCode::kInvalidArgument);
  auto scheduler = Options();
  scheduler.scheduler.max_num_seqs = 0;
  EXPECT_EQ(ResolveEngineOptions(*model_, scheduler).status().code(), ErrorCode::kInvalidArgument);
}

TEST_F(DecoderWorkerTest, AutoCapsTheCacheAtMaxNumSeqsSequencesAndTheEngineGetsTheOptions) {
  auto options = ResolveEngineOptions(*model_, Options());
  ASSERT_TRUE(options.ok());
  auto kv = SizeDecoderKvCache(*model_, *options);
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  // "auto" is capped at what 3 sequences of 64 tokens can use (plus one
  // block): (3 * 64 + 4) / 4 = 49 blocks, whatever the host's memory.
  EXPECT_EQ(kv->num_blocks, 49);
  EXPECT_EQ(kv->tokens, 49 * 4);
  EXPECT_EQ(kv->bytes, kv->tokens * model_->KvBytesPerToken());
  auto worker = BuildDecoderWorker(*model_, *options, *kv);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  EXPECT_EQ(worker->engine.num_blocks, 49);
  EXPECT_EQ(worker->engine.block_size, 4);
  EXPECT_EQ(worker->engine.scheduler.max_num_seqs, 3);
  EXPECT_EQ(worker->engine.scheduler.max_model_len, 64);
  EXPECT_EQ(worker->engine.eos_token_ids,
            std::vector<TokenId>(model_->config().eos_token_ids.begin(), model_->config().eos_token_ids.end()));
  // CPU workers never pad decode steps nor capture graphs.
  EXPECT_FALSE(UsesCudaGraphs(*model_, *options));
  EXPECT_EQ(worker->execution, "eager");
  EXPECT_EQ(worker->executor.get(), static_cast<ModelExecutor*>(worker->runner));
  EXPECT_EQ(worker->kv_offload.num_blocks, 0);
  EXPECT_EQ(worker->engine.kv_offload_mover, nullptr);
}

TEST_F(DecoderWorkerTest, ServeAndOfflineBuildTheSameWorker) {
  auto served = ServeDecoder(*model_, "tiny", Options());
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  OfflineOptions oo;
  oo.block_size = 4;
  oo.max_num_seqs = 3;
  oo.max_num_batched_tokens = 32;
  auto offline = OfflineDecoder(*model_, oo);
  ASSERT_TRUE(offline.ok()) << offline.status().ToString();
  EXPECT_EQ((*served)->kv_cache().num_blocks, (*offline)->kv_cache().num_blocks);
  EXPECT_EQ((*served)->kv_cache().bytes, (*offline)->kv_cache().bytes);
  EXPECT_EQ((*served)->execution(), (*offline)->execution());
  const EngineConfig& a = (*served)->engine_config();
  const EngineConfig& b = (*offline)->engine_config();
  EXPECT_EQ(a.num_blocks, b.num_blocks);
  EXPECT_EQ(a.block_size, b.block_size);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
  EXPECT_EQ(a.scheduler.max_model_len, b.scheduler.max_model_len);
  EXPECT_EQ(a.scheduler.max_num_seqs, b.scheduler.max_num_seqs);
  EXPECT_EQ(a.scheduler.max_num_batched_tokens, b.scheduler.max_num_batched_tokens);
  // The same greedy tokens, one on the engine's thread, one stepped here:
  // the same runner and shapes, so the same arithmetic.
  service::GenerationFields f;
  f.max_tokens = 10;
  f.ignore_eos = true;
  const std::vector<std::int64_t> prompt = {5, 9, 2, 7, 1, 3};
  auto a_out = (*served)->Generate(prompt, testing::Validated(**served, f, prompt.size()));
  auto b_out = (*offline)->Generate(prompt, testing::Validated(**offline, f, prompt.size()));
  ASSERT_TRUE(a_out.ok()) << a_out.status().ToString();
  ASSERT_TRUE(b_out.ok()) << b_out.status().ToString();
  EXPECT_EQ(a_out->generated_ids.size(), 10u);
  EXPECT_EQ(a_out->generated_ids, b_out->generated_ids);
}

TEST_F(DecoderWorkerTest, TheHostTierNeedsPrefixCachingAndIsTheRunnersToMove) {
  auto options = ResolveEngineOptions(*model_, Options());
  ASSERT_TRUE(options.ok());
  auto kv = SizeDecoderKvCache(*model_, *options);
  ASSERT_TRUE(kv.ok());
  service::EngineOptions tiered = *options;
  tiered.kv_offload_memory = "64K";
  tiered.scheduler.enable_prefix_caching = false;
  EXPECT_EQ(BuildDecoderWorker(*model_, tiered, *kv).status().code(), ErrorCode::kInvalidArgument);
  tiered.scheduler.enable_prefix_caching = true;
  auto worker = BuildDecoderWorker(*model_, tiered, *kv);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  const std::int64_t block_bytes = model_->KvBytesPerToken() * 4;
  EXPECT_EQ(worker->kv_offload.num_blocks, (64 << 10) / block_bytes);
  EXPECT_EQ(worker->engine.kv_offload_blocks, worker->kv_offload.num_blocks);
  EXPECT_EQ(worker->engine.kv_offload_mover, static_cast<KvBlockMover*>(worker->runner));
  tiered.kv_offload_memory = "1";  // one byte: not one block
  EXPECT_EQ(BuildDecoderWorker(*model_, tiered, *kv).status().code(), ErrorCode::kInvalidArgument);
}

// --kv-offload-path: the tier in a file needs the tier's size, and a
// directory it cannot write to is refused at start with its reason.
TEST_F(DecoderWorkerTest, TheTierInAFileNeedsItsSizeAndAWritableDirectory) {
  auto options = ResolveEngineOptions(*model_, Options());
  ASSERT_TRUE(options.ok());
  auto kv = SizeDecoderKvCache(*model_, *options);
  ASSERT_TRUE(kv.ok());
  testing::ScratchDir dir;
  service::EngineOptions tiered = *options;
  tiered.kv_offload_path = dir.path();
  auto no_size = BuildDecoderWorker(*model_, tiered, *kv);
  EXPECT_EQ(no_size.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(no_size.status().message().find("--kv-offload-memory"), std::string::npos) << no_size.status().ToString();
  tiered.kv_offload_memory = "64K";
  auto worker = BuildDecoderWorker(*model_, tiered, *kv);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  EXPECT_EQ(worker->kv_offload.num_blocks, (64 << 10) / (model_->KvBytesPerToken() * 4));
  tiered.kv_offload_path = dir.path() + "/missing";
  auto missing = BuildDecoderWorker(*model_, tiered, *kv);
  EXPECT_EQ(missing.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(missing.status().message().find("--kv-offload-path " + dir.path() + "/missing: cannot create a file"),
            std::string::npos)
      << missing.status().ToString();
}

TEST_F(DecoderWorkerTest, InjectedFaultsWrapTheRunnerAndThrowEveryNthStep) {
  auto options = ResolveEngineOptions(*model_, Options());
  ASSERT_TRUE(options.ok());
  options->inject_faults_every = 2;
  auto kv = SizeDecoderKvCache(*model_, *options);
  ASSERT_TRUE(kv.ok());
  auto worker = BuildDecoderWorker(*model_, *options, *kv);
  ASSERT_TRUE(worker.ok());
  EXPECT_NE(worker->executor.get(), static_cast<ModelExecutor*>(worker->runner));
  StepPlan empty;
  empty.block_size = 4;
  EXPECT_NO_THROW((void)worker->executor->Execute(empty));
  EXPECT_THROW((void)worker->executor->Execute(empty), std::runtime_error);
  EXPECT_NO_THROW((void)worker->executor->Execute(empty));
}

}  // namespace
}  // namespace ropeserve
