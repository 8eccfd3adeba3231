// Sentence embeddings against llama.cpp on the same weights: the tiny
// ModernBERT (mean pooling) and Qwen3 (last-token pooling) embedders of
// tests/data/models/, embedded from token ids by ropeserve's serving path
// (EncoderService, unnormalized), against llama.cpp's llama-server
// --embedding output in tests/data/golden/embedding_llamacpp.json (F32
// GGUF of the same safetensors, float32 KV cache, no flash attention;
// scripts/llamacpp-embedding-golden). Bounds:
//  - Qwen3: llama.cpp computes this path in float32 throughout, so the two
//    differ only in rounding order: RoundingBound over the longest
//    reduction (the attention over the longest input, 130 tokens) and the
//    depth (measured: 3.9e-6);
//  - ModernBERT: llama.cpp's CPU GeGLU rounds its input to float16 and reads
//    GELU from a float16 table of the tanh form (ggml-cpu/vec.h,
//    GGML_GELU_FP16) where transformers and ropeserve use the exact erf
//    GELU, errors of ~2^-11 relative per activation; issue 35's 2e-3 for
//    two float32 implementations is the bound (measured: 9.0e-4).
// Inputs longer than ModernBERT's 16-token local window check its
// sliding-window layers; the normalized vectors are the unit vectors of
// these.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "server/serving/service_factory.h"
#include "tests/common/float_bounds.h"

namespace ropeserve {
namespace {

using json = nlohmann::json;

constexpr double kIssueBound = 2e-3;

json Golden() {
  std::ifstream in(std::string(ROPESERVE_TEST_DATA) + "/golden/embedding_llamacpp.json");
  EXPECT_TRUE(in.good());
  return in.good() ? json::parse(in) : json::object();
}

class LlamaCppEmbedding : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaCppEmbedding, PooledHiddenStatesEqualLlamaCpp) {
  const json golden = Golden();
  ASSERT_TRUE(golden.contains("models") && golden["models"].contains(GetParam()));
  const json& model = golden["models"][GetParam()];
  auto s = LoadEncoderService(std::string(ROPESERVE_TEST_DATA) + "/models/" + GetParam(), GetParam());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // llama.cpp's "last" is sentence-transformers' "lasttoken".
  const std::string pooling = model["pooling"].get<std::string>();
  EXPECT_EQ(embedding::PoolingName((*s)->pooling().pooling), pooling == "last" ? "lasttoken" : pooling);
  const EncoderConfig& config = (*s)->config();
  double kBound = kIssueBound;
  if (config.family == EncoderFamily::kDecoder) {
    std::int64_t longest = 0;
    double scale = 1;  // the values' magnitude
    for (const json& c : model["cases"]) {
      longest = std::max<std::int64_t>(longest, c["ids"].size());
      for (double v : c["embedding"].get<std::vector<double>>()) scale = std::max(scale, std::abs(v));
    }
    kBound = testing::RoundingBound(std::max({longest, config.hidden_size, config.intermediate_size}),
                                    config.num_hidden_layers + 1, scale);
    EXPECT_LT(kBound, kIssueBound);
  }
  double worst = 0;
  ASSERT_GE(model["cases"].size(), 3u);
  for (const json& c : model["cases"]) {
    const std::vector<TokenId> ids = c["ids"].get<std::vector<TokenId>>();
    const std::vector<double> expected = c["embedding"].get<std::vector<double>>();
    service::EmbedOptions raw;
    raw.normalize = false;
    auto got = (*s)->Embed({service::EncoderInput::Ids(ids)}, raw);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const std::vector<float>& v = (*got)[0].embedding;
    ASSERT_EQ(v.size(), expected.size());
    double norm = 0;
    for (std::size_t k = 0; k < v.size(); ++k) {
      EXPECT_NEAR(v[k], expected[k], kBound) << GetParam() << ": " << ids.size() << " tokens, value " << k;
      worst = std::max(worst, std::abs(v[k] - expected[k]));
      norm += expected[k] * expected[k];
    }
    EXPECT_GT(std::sqrt(norm), 0.1) << "degenerate golden";
    // The served (normalized) vector is the unit vector of the same.
    auto unit = (*s)->Embed({service::EncoderInput::Ids(ids)}, {});
    ASSERT_TRUE(unit.ok());
    for (std::size_t k = 0; k < v.size(); ++k)
      EXPECT_NEAR((*unit)[0].embedding[k], expected[k] / std::sqrt(norm), kBound);
  }
  RecordProperty("max_abs_diff", std::to_string(worst));
  std::printf("%s: largest difference from llama.cpp %.3g (bound %.3g)\n", GetParam(), worst, kBound);
}

INSTANTIATE_TEST_SUITE_P(Embedders, LlamaCppEmbedding, ::testing::Values("modernbert-embed-tiny", "qwen3-embed-tiny"));

}  // namespace
}  // namespace ropeserve
