// RoPE inverse frequencies and attention factors against values worked out
// independently from Hugging Face's modeling_rope_utils.py formulas
// (tests/tools/rope_expected.py prints them).
#include "server/checkpoint/rope.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ropeserve {
namespace {

ModelConfig Config(std::int64_t head_dim, double theta, const std::string& scaling_json = "",
                   std::int64_t max_pos = 2048) {
  std::string j = R"({"architectures":["LlamaForCausalLM"],"vocab_size":100,"hidden_size":)" +
                  std::to_string(head_dim * 2) + R"(,"intermediate_size":8,"num_hidden_layers":1,)" +
                  R"("num_attention_heads":2,"max_position_embeddings":)" + std::to_string(max_pos) +
                  R"(,"rope_theta":)" + std::to_string(theta);
  if (!scaling_json.empty()) j += R"(,"rope_scaling":)" + scaling_json;
  j += "}";
  auto c = ParseModelConfig(j, "test");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig{};
}

void ExpectNear(const std::vector<double>& got, const std::vector<int>& idx, const std::vector<double>& want) {
  ASSERT_EQ(idx.size(), want.size());
  for (size_t i = 0; i < idx.size(); ++i) EXPECT_NEAR(got.at(idx[i]) / want[i], 1.0, 1e-12) << "index " << idx[i];
}

TEST(Rope, DefaultIsBasePowers) {
  auto f = ComputeRopeFrequencies(Config(8, 10000.0));
  ASSERT_EQ(f.inv_freq.size(), 4u);
  ExpectNear(f.inv_freq, {0, 1, 2, 3}, {1.0, 0.1, 0.01, 0.001});
  EXPECT_EQ(f.attention_factor, 1.0);
}

TEST(Rope, PartialRotaryUsesFractionOfHeadDim) {
  auto c = ParseModelConfig(R"({"architectures":["LlamaForCausalLM"],"vocab_size":10,"hidden_size":32,
    "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"partial_rotary_factor":0.5})",
                            "t");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->rotary_dim(), 8);
  auto f = ComputeRopeFrequencies(*c);
  ASSERT_EQ(f.inv_freq.size(), 4u);
  ExpectNear(f.inv_freq, {1}, {0.1});  // base^(-2/8)
}

TEST(Rope, LinearDividesByFactor) {
  auto f = ComputeRopeFrequencies(Config(8, 10000.0, R"({"type":"linear","factor":4.0})"));
  ExpectNear(f.inv_freq, {0, 1, 2, 3}, {0.25, 0.025, 0.0025, 0.00025});
  EXPECT_EQ(f.attention_factor, 1.0);
}

TEST(Rope, Llama3MatchesWorkedValues) {
  auto f =
      ComputeRopeFrequencies(Config(128, 500000.0,
                                    R"({"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,
          "original_max_position_embeddings":8192})",
                                    131072));
  ASSERT_EQ(f.inv_freq.size(), 64u);
  ExpectNear(f.inv_freq, {0, 1, 10, 20, 30, 40, 50, 63},
             {1, 0.81461723385654472, 0.12868737343265052, 0.016560440080994446, 0.0013718935677611381,
              3.4281021959525912e-05, 4.4115346745584042e-06, 3.0689259889145111e-07});
  EXPECT_EQ(f.attention_factor, 1.0);
}

TEST(Rope, YarnMatchesWorkedValues) {
  auto f = ComputeRopeFrequencies(
      Config(128, 1000000.0, R"({"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768})", 131072));
  ExpectNear(f.inv_freq, {0, 1, 10, 20, 30, 40, 50, 63},
             {1, 0.80584218776148187, 0.1154781984689458, 0.013335214321633241, 0.0010643609812470017,
              4.4456985250973067e-05, 5.1338125661428656e-06, 3.1023444018792988e-07});
  EXPECT_NEAR(f.attention_factor, 1.1386294361119891, 1e-12);
}

TEST(Rope, YarnMscaleRatioSetsAttentionFactor) {
  auto f = ComputeRopeFrequencies(Config(
      64, 10000.0,
      R"({"type":"yarn","factor":40.0,"original_max_position_embeddings":4096,"mscale":1.0,"mscale_all_dim":0.5})",
      163840));
  EXPECT_NEAR(f.attention_factor, 1.1557219901962608, 1e-12);
  ExpectNear(f.inv_freq, {0, 5, 10, 15, 20, 31},
             {1, 0.23713737056616555, 0.056234132519034905, 0.0083345089510207769, 0.00079056941504209452,
              3.3338035804083101e-06});
  auto equal = ComputeRopeFrequencies(Config(
      64, 10000.0,
      R"({"type":"yarn","factor":40.0,"original_max_position_embeddings":4096,"mscale":0.707,"mscale_all_dim":0.707})",
      163840));
  EXPECT_NEAR(equal.attention_factor, 1.0, 1e-12);
}

TEST(Rope, YarnExplicitAttentionFactorWins) {
  auto f = ComputeRopeFrequencies(
      Config(64, 10000.0,
             R"({"type":"yarn","factor":4.0,"attention_factor":0.5,"original_max_position_embeddings":1024})", 4096));
  EXPECT_EQ(f.attention_factor, 0.5);
}

TEST(Rope, DynamicGrowsBaseOnlyBeyondMaxPositions) {
  auto c = Config(64, 10000.0, R"({"type":"dynamic","factor":2.0})", 2048);
  ExpectNear(ComputeRopeFrequencies(c, 4096).inv_freq, {0, 1, 10, 31},
             {1, 0.72378402239425588, 0.039453898033526412, 4.4450714405444141e-05});
  ExpectNear(ComputeRopeFrequencies(c, 1000).inv_freq, {0, 1, 10, 31},
             {1, 0.74989420933245587, 0.056234132519034905, 0.0001333521432163324});
  EXPECT_TRUE(RopeDependsOnLength(c));
}

TEST(Rope, TransformersFiveRopeParametersAreRead) {
  auto c = ParseModelConfig(R"({"architectures":["Qwen3ForCausalLM"],"vocab_size":10,"hidden_size":16,
    "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,
    "rope_parameters":{"rope_type":"linear","rope_theta":100.0,"factor":2.0}})",
                            "t");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_theta, 100.0);
  auto f = ComputeRopeFrequencies(*c);
  ExpectNear(f.inv_freq, {0, 1}, {0.5, 0.5 * std::pow(100.0, -0.25)});  // head_dim 8
}

}  // namespace
}  // namespace ropeserve
