// Prompt logprobs (vLLM's prompt_logprobs, OpenAI's echo with logprobs)
// through the serving path, against the dense reference forward.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "server/engine/scheduler.h"
#include "server/models/decoder.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/common/offline.h"
#include "tests/models/reference_decoder.h"

namespace ropeserve {
namespace {

// The serving path (paged attention, packed batches) and the reference
// (dense attention) agree on logits within 2e-3 (LlamaCppParity's bound
// against llama.cpp, which both meet); a logprob is a logit minus the
// row's log-sum-exp, so it may differ by twice that.
constexpr double kLogprobTolerance = 4e-3;

class PromptLogprobs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = DecoderModel::Load(testing::TestData("models/llama-tiny"), DType::kF32);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() { delete model_; }
  // log_softmax of the reference's logits at every position.
  static at::Tensor ReferenceLogprobs(const std::vector<std::int64_t>& prompt) {
    return at::log_softmax(testing::ReferenceForward(*model_, at::tensor(prompt, at::kLong)), 1);
  }
  static std::vector<std::int64_t> Prompt(std::size_t n) {
    std::vector<std::int64_t> p;
    for (std::size_t i = 0; i < n; ++i) p.push_back(static_cast<std::int64_t>((i * 37 + 11) % 250) + 1);
    return p;
  }
  static DecoderModel* model_;
};
DecoderModel* PromptLogprobs::model_ = nullptr;

TEST_F(PromptLogprobs, EveryPromptTokenAfterTheFirstMatchesTheReference) {
  const auto prompt = Prompt(40);
  service::GenerationFields o;
  o.max_tokens = 2;
  o.prompt_logprobs = 3;
  auto r = testing::OfflineGenerate(*model_, prompt, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->prompt_logprobs.size(), prompt.size() - 1);
  ASSERT_EQ(r->prompt_ranks.size(), prompt.size() - 1);
  ASSERT_EQ(r->prompt_top_logprobs.size(), prompt.size() - 1);
  const at::Tensor ref = ReferenceLogprobs(prompt);
  for (std::size_t j = 1; j < prompt.size(); ++j) {
    // Row j - 1 predicts token j.
    EXPECT_NEAR(r->prompt_logprobs[j - 1], ref[j - 1][prompt[j]].item<double>(), kLogprobTolerance) << j;
    // vLLM's rank: 1 + the tokens the model finds likelier. The reference's
    // logprobs may differ by the tolerance, so tokens within it of the
    // prompt token may count either way.
    const double own = ref[j - 1][prompt[j]].item<double>();
    const auto likelier = [&](double margin) { return (ref[j - 1] > own + margin).sum().item<std::int64_t>(); };
    EXPECT_GE(r->prompt_ranks[j - 1], 1 + likelier(2 * kLogprobTolerance)) << j;
    EXPECT_LE(r->prompt_ranks[j - 1], 1 + likelier(-2 * kLogprobTolerance)) << j;
    const auto& top = r->prompt_top_logprobs[j - 1];
    ASSERT_EQ(top.size(), 3u);
    EXPECT_NEAR(top[0].logprob, ref[j - 1].max().item<double>(), kLogprobTolerance) << j;
    EXPECT_GE(top[0].logprob, top[1].logprob);
    EXPECT_GE(top[0].logprob, r->prompt_logprobs[j - 1] - kLogprobTolerance);
  }
  // Without asking: none.
  o.prompt_logprobs.reset();
  auto plain = testing::OfflineGenerate(*model_, prompt, o);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->prompt_logprobs.empty());
  // The generated tokens do not depend on asking (the prompt rows are a
  // forward of their own).
  EXPECT_EQ(plain->generated_ids, r->generated_ids);
  EXPECT_EQ(plain->logprobs, r->logprobs);
}

TEST_F(PromptLogprobs, ChunkedPrefillAndThePrefixCacheGiveEachPositionOnce) {
  const auto prompt = Prompt(50);
  service::GenerationFields o;
  o.max_tokens = 1;
  o.prompt_logprobs = 0;
  auto whole = testing::OfflineGenerate(*model_, prompt, o);
  ASSERT_TRUE(whole.ok());
  OfflineOptions small;
  small.max_num_batched_tokens = 7;  // the prompt in 8 chunks
  small.block_size = 4;
  auto service = OfflineDecoder(*model_, small);
  ASSERT_TRUE(service.ok());
  // Twice: the second run finds the prompt in the prefix cache, and must
  // compute it again to report its logprobs.
  for (int run = 0; run < 2; ++run) {
    auto chunked = (*service)->Generate(prompt, testing::Validated(**service, o, prompt.size()));
    ASSERT_TRUE(chunked.ok()) << chunked.status().ToString();
    ASSERT_EQ(chunked->prompt_logprobs.size(), prompt.size() - 1) << run;
    EXPECT_EQ(chunked->cached_tokens, 0) << run;
    for (std::size_t j = 0; j < chunked->prompt_logprobs.size(); ++j)
      EXPECT_NEAR(chunked->prompt_logprobs[j], whole->prompt_logprobs[j], kLogprobTolerance) << run << " " << j;
    EXPECT_TRUE(chunked->prompt_top_logprobs[0].empty());  // 0 alternatives
  }
  // A one-token prompt has none.
  auto one = (*service)->Generate({5}, testing::Validated(**service, o, 1));
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(one->prompt_logprobs.empty());
}

TEST_F(PromptLogprobs, PromptsLongerThanTheRowCapAreScoredOverSeveralSteps) {
  const auto prompt = Prompt(static_cast<std::size_t>(kMaxPromptLogprobRows) + 60);
  service::GenerationFields o;
  o.max_tokens = 1;
  o.prompt_logprobs = 1;
  auto r = testing::OfflineGenerate(*model_, prompt, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->prompt_logprobs.size(), prompt.size() - 1);
  const at::Tensor ref = ReferenceLogprobs(prompt);
  for (std::size_t j = 1; j < prompt.size(); ++j)
    EXPECT_NEAR(r->prompt_logprobs[j - 1], ref[j - 1][prompt[j]].item<double>(), kLogprobTolerance) << j;
}

TEST_F(PromptLogprobs, TeacherForcingAgreesWithGeneration) {
  // Greedy decoding from a prompt, then the prompt + what was generated
  // scored as a prompt: the same tokens, the same logprobs.
  const auto prompt = Prompt(12);
  service::GenerationFields g;
  g.max_tokens = 6;
  g.ignore_eos = true;
  auto gen = testing::OfflineGenerate(*model_, prompt, g);
  ASSERT_TRUE(gen.ok());
  auto scored_prompt = prompt;
  scored_prompt.insert(scored_prompt.end(), gen->generated_ids.begin(), gen->generated_ids.end());
  service::GenerationFields s;
  s.max_tokens = 1;
  s.prompt_logprobs = 0;
  auto scored = testing::OfflineGenerate(*model_, scored_prompt, s);
  ASSERT_TRUE(scored.ok());
  for (std::size_t i = 0; i < gen->generated_ids.size(); ++i)
    EXPECT_NEAR(scored->prompt_logprobs[prompt.size() - 1 + i], gen->logprobs[i], kLogprobTolerance) << i;
}

}  // namespace
}  // namespace ropeserve
