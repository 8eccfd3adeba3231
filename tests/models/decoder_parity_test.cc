// Parity with an independent implementation: llama.cpp's logits and greedy
// tokens for the tiny random Llama (tests/data/README.md).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "server/models/decoder.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/common/offline.h"
#include "tests/models/reference_decoder.h"

namespace ropeserve {
namespace {

// How far two float32 forwards that differ only in summation order may
// drift apart at one logit. A float32 sum of n terms, in any order, is off
// by at most gamma_n = n*u/(1 - n*u) of the sum of the terms' magnitudes
// (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 3.1),
// u = 2^-24; two such sums differ by at most twice that. A logit's value
// passes through, per layer: the input RMSNorm's sum of squares (hidden),
// the q/k/v projections (hidden), the QK dot (head_dim), the softmax
// denominator and the weighted values (the positions attended, each), the
// output projection (hidden), the post-attention RMSNorm and the gate/up
// projections (hidden each), the down projection (intermediate); then the
// final RMSNorm and the LM head (hidden each). The budget sums those
// lengths and takes the row's largest |logit| as the scale of the terms
// (a first-order bound that treats each stage as well conditioned: the
// weights are random, the activations normalized every layer).
double LogitBound(const ModelConfig& c, std::size_t position, double row_scale) {
  const double u = std::ldexp(1.0, -24);
  const double attended = static_cast<double>(position + 1);
  const double per_layer = 5.0 * static_cast<double>(c.hidden_size) + static_cast<double>(c.head_dim) + 2.0 * attended +
                           static_cast<double>(c.intermediate_size);
  const double n = static_cast<double>(c.num_hidden_layers) * per_layer + 2.0 * static_cast<double>(c.hidden_size);
  return 2.0 * (n * u / (1.0 - n * u)) * row_scale;
}

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

// Our logits at llama.cpp's top-5 ids, within LogitBound; our argmax
// equal to theirs unless their top two are a near tie. Returns the largest
// |difference| / bound seen (printed: how much of the budget is used).
double ExpectTopkMatches(const ModelConfig& c, const at::Tensor& row, std::size_t position, const nlohmann::json& topk,
                         const std::string& where) {
  const auto ids = topk["top_ids"].get<std::vector<std::int64_t>>();
  const auto logits = topk["top_logits"].get<std::vector<double>>();
  auto acc = row.accessor<float, 1>();
  const double bound = LogitBound(c, position, row.abs().max().item<double>());
  double used = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_NEAR(acc[ids[i]], logits[i], bound) << where << " id " << ids[i];
    used = std::max(used, std::abs(acc[ids[i]] - logits[i]) / bound);
  }
  if (topk["margin"].get<double>() >= 1e-3) {
    EXPECT_EQ(row.argmax().item<std::int64_t>(), ids[0]) << where;
  }
  return used;
}

TEST_F(LlamaCppParity, TeacherForcedLogitsAtEveryPromptPositionAndStep) {
  size_t compared = 0;
  double used = 0;
  for (const auto& c : (*golden_)["cases"]) {
    auto seq = c["prompt_ids"].get<std::vector<std::int64_t>>();
    const auto gen = c["generated_ids"].get<std::vector<std::int64_t>>();
    const size_t n_prompt = seq.size();
    seq.insert(seq.end(), gen.begin(), gen.end());
    at::Tensor logits = testing::ReferenceForward(*model_, at::tensor(seq, at::kLong));
    const std::string name = c["name"].get<std::string>();
    const ModelConfig& config = model_->config();
    for (size_t j = 0; j < c["prompt_topk"].size(); ++j, ++compared)
      used = std::max(used, ExpectTopkMatches(config, logits[j], j, c["prompt_topk"][j],
                                              name + " prompt position " + std::to_string(j)));
    for (size_t i = 0; i < c["steps"].size(); ++i, ++compared)
      used = std::max(used, ExpectTopkMatches(config, logits[n_prompt - 1 + i], n_prompt - 1 + i, c["steps"][i],
                                              name + " step " + std::to_string(i)));
  }
  EXPECT_GT(compared, 1500u);
  std::printf("largest |ours - llama.cpp| / bound: %.3f\n", used);
}

TEST_F(LlamaCppParity, GreedyTokensUpToFirstNearTie) {
  for (const auto& c : (*golden_)["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<std::int64_t>>();
    const auto want = c["generated_ids"].get<std::vector<std::int64_t>>();
    service::GenerationFields opts;
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
