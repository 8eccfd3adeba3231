// Parity with an independent implementation: llama.cpp's logits and greedy
// tokens for the tiny random Llama (tests/data/README.md).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "server/models/decoder.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/common/offline.h"
#include "tests/models/reference_decoder.h"

namespace ropeserve {
namespace {

constexpr double kLogitTolerance = 2e-3;

class LlamaCppParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = DecoderModel::Load(testing::TestData("models/llama-tiny"), DType::kF32);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    golden_ = new nlohmann::json(testing::ReadJson(testing::TestData("golden/decoder_llama-tiny.json")));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete golden_;
  }
  static DecoderModel* model_;
  static nlohmann::json* golden_;
};
DecoderModel* LlamaCppParity::model_ = nullptr;
nlohmann::json* LlamaCppParity::golden_ = nullptr;

// Our logits at llama.cpp's top-5 ids, within tolerance; our argmax equal
// to theirs unless their top two are a near tie.
void ExpectTopkMatches(const at::Tensor& row, const nlohmann::json& topk, const std::string& where) {
  const auto ids = topk["top_ids"].get<std::vector<std::int64_t>>();
  const auto logits = topk["top_logits"].get<std::vector<double>>();
  auto acc = row.accessor<float, 1>();
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_NEAR(acc[ids[i]], logits[i], kLogitTolerance) << where << " id " << ids[i];
  if (topk["margin"].get<double>() >= 1e-3) {
    EXPECT_EQ(row.argmax().item<std::int64_t>(), ids[0]) << where;
  }
}

TEST_F(LlamaCppParity, TeacherForcedLogitsAtEveryPromptPositionAndStep) {
  size_t compared = 0;
  for (const auto& c : (*golden_)["cases"]) {
    auto seq = c["prompt_ids"].get<std::vector<std::int64_t>>();
    const auto gen = c["generated_ids"].get<std::vector<std::int64_t>>();
    const size_t n_prompt = seq.size();
    seq.insert(seq.end(), gen.begin(), gen.end());
    at::Tensor logits = testing::ReferenceForward(*model_, at::tensor(seq, at::kLong));
    const std::string name = c["name"].get<std::string>();
    for (size_t j = 0; j < c["prompt_topk"].size(); ++j, ++compared)
      ExpectTopkMatches(logits[j], c["prompt_topk"][j], name + " prompt position " + std::to_string(j));
    for (size_t i = 0; i < c["steps"].size(); ++i, ++compared)
      ExpectTopkMatches(logits[n_prompt - 1 + i], c["steps"][i], name + " step " + std::to_string(i));
  }
  EXPECT_GT(compared, 1500u);
}

TEST_F(LlamaCppParity, GreedyTokensUpToFirstNearTie) {
  for (const auto& c : (*golden_)["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<std::int64_t>>();
    const auto want = c["generated_ids"].get<std::vector<std::int64_t>>();
    GenerateOptions opts;
    opts.max_tokens = static_cast<std::int64_t>(want.size());
    opts.ignore_eos = true;
    auto got = testing::OfflineGenerate(*model_, prompt, opts);  // the serving path
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    size_t limit = c["first_near_tie_step"].is_null() ? want.size() : c["first_near_tie_step"].get<size_t>();
    ASSERT_GE(got->generated_ids.size(), limit);
    for (size_t i = 0; i < limit; ++i)
      ASSERT_EQ(got->generated_ids[i], want[i]) << c["name"].get<std::string>() << " step " << i;
  }
}

}  // namespace
}  // namespace ropeserve
