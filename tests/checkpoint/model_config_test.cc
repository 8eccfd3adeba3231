#include "server/checkpoint/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ropeserve {
namespace {

std::string Base(const std::string& arch, const std::string& extra = "") {
  return R"({"architectures":[")" + arch + R"("],"vocab_size":100,"hidden_size":64,"intermediate_size":128,
    "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2)" +
         extra + "}";
}

StatusOr<ModelConfig> Parse(const std::string& text) { return ParseModelConfig(text, "config.json"); }

void ExpectInvalid(const std::string& text, const std::string& part, ErrorCode code = ErrorCode::kInvalidArgument) {
  auto c = Parse(text);
  ASSERT_FALSE(c.ok()) << text;
  EXPECT_EQ(c.status().code(), code) << c.status().ToString();
  EXPECT_NE(c.status().message().find(part), std::string::npos) << c.status().ToString();
}

// *Model: the trunk alone, named as Hugging Face saves a base model (no
// prefix), with no lm_head expected; a family's own settings still apply.
TEST(ModelConfig, BaseModelsAreTrunksWithoutAHead) {
  auto qwen3 = Parse(Base("Qwen3Model", R"(,"tie_word_embeddings":false)"));
  ASSERT_TRUE(qwen3.ok()) << qwen3.status().ToString();
  EXPECT_TRUE(qwen3->base_model);
  EXPECT_FALSE(qwen3->span_head);
  EXPECT_TRUE(qwen3->qk_norm);
  EXPECT_EQ(qwen3->trunk_prefix, "");
  const auto tensors = ExpectedTensors(*qwen3);
  EXPECT_EQ(tensors.front().name, "embed_tokens.weight");
  EXPECT_EQ(tensors.back().name, "norm.weight");
  EXPECT_TRUE(IsIgnorableTensor("lm_head.weight", *qwen3));
  auto lm = Parse(Base("Qwen3ForCausalLM", R"(,"tie_word_embeddings":false)"));
  ASSERT_TRUE(lm.ok());
  EXPECT_FALSE(lm->base_model);
  EXPECT_EQ(ExpectedTensors(*lm).back().name, "lm_head.weight");
}

TEST(ModelConfig, FamiliesSetTheirBiasesAndNorms) {
  auto llama = Parse(Base("LlamaForCausalLM"));
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  EXPECT_FALSE(llama->qkv_bias);
  EXPECT_FALSE(llama->qk_norm);
  EXPECT_EQ(llama->head_dim, 16);

  auto llama_bias = Parse(Base("LlamaForCausalLM", R"(,"attention_bias":true,"mlp_bias":true)"));
  EXPECT_TRUE(llama_bias->qkv_bias && llama_bias->o_proj_bias && llama_bias->mlp_bias);

  auto qwen2 = Parse(Base("Qwen2ForCausalLM"));
  EXPECT_TRUE(qwen2->qkv_bias);
  EXPECT_FALSE(qwen2->o_proj_bias);

  auto qwen3 = Parse(Base("Qwen3ForCausalLM", R"(,"head_dim":32)"));
  EXPECT_TRUE(qwen3->qk_norm);
  EXPECT_FALSE(qwen3->qkv_bias);
  EXPECT_EQ(qwen3->head_dim, 32);  // explicit head_dim need not be hidden/heads
}

TEST(ModelConfig, ExpectedTensorsFollowTheConfig) {
  auto tied = Parse(Base("LlamaForCausalLM", R"(,"tie_word_embeddings":true)"));
  auto untied = Parse(Base("LlamaForCausalLM"));
  auto qwen3 = Parse(Base("Qwen3ForCausalLM"));
  auto names = [](const ModelConfig& c) {
    std::vector<std::string> n;
    for (auto& t : ExpectedTensors(c)) n.push_back(t.name);
    return n;
  };
  auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  EXPECT_FALSE(has(names(*tied), "lm_head.weight"));
  EXPECT_TRUE(has(names(*untied), "lm_head.weight"));
  EXPECT_TRUE(has(names(*qwen3), "model.layers.1.self_attn.k_norm.weight"));
  EXPECT_EQ(names(*untied).size(), 1u + 2u * 9u + 1u + 1u);
}

TEST(ModelConfig, ModelTypeStandsInForArchitectures) {
  auto c = Parse(R"({"model_type":"qwen2","vocab_size":10,"hidden_size":8,"intermediate_size":8,
    "num_hidden_layers":1,"num_attention_heads":2})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, ModelFamily::kQwen2);
  EXPECT_EQ(c->num_key_value_heads, 2);  // defaults to num_attention_heads
}

TEST(ModelConfig, RejectsBadValues) {
  ExpectInvalid(Base("LlamaForCausalLM", R"(,"rms_norm_eps":-1)"), "rms_norm_eps");
  ExpectInvalid(R"({"architectures":["LlamaForCausalLM"],"vocab_size":"100"})", "'vocab_size' must be an integer");
  ExpectInvalid(R"({"architectures":["LlamaForCausalLM"],"vocab_size":100})", "missing required key 'hidden_size'");
  ExpectInvalid(Base("LlamaForCausalLM", R"(,"max_position_embeddings":0)"),
                "'max_position_embeddings' must be positive");
  ExpectInvalid(Base("LlamaForCausalLM", R"(,"hidden_act":"gelu")"), "hidden_act 'gelu'", ErrorCode::kUnimplemented);
  ExpectInvalid(Base("BertModel"), "unknown architecture", ErrorCode::kUnimplemented);
  ExpectInvalid(Base("LlamaForCausalLM", R"(,"partial_rotary_factor":1.5)"), "partial_rotary_factor");
  ExpectInvalid(Base("LlamaForCausalLM", R"(,"head_dim":15)"), "must be even");
  ExpectInvalid(Base("LlamaForCausalLM", R"(,"eos_token_id":[1,"x"])"), "eos_token_id");
  ExpectInvalid(Base("LlamaForCausalLM", R"(,"eos_token_id":100)"), "outside the vocabulary");
  ExpectInvalid("[]", "not a JSON object");
  ExpectInvalid(Base("LlamaForCausalLM", R"(,"hidden_size":1e30)"), "'hidden_size' must be an integer");
}

TEST(ModelConfig, RejectsBadRopeScaling) {
  ExpectInvalid(Base("LlamaForCausalLM", R"(,"rope_scaling":{"type":"longrope","factor":2})"), "longrope",
                ErrorCode::kUnimplemented);
  ExpectInvalid(Base("LlamaForCausalLM", R"(,"rope_scaling":{"type":"linear"})"), "'factor'");
  ExpectInvalid(Base("LlamaForCausalLM", R"(,"rope_scaling":{"type":"linear","factor":-2})"), "factor");
  ExpectInvalid(Base("LlamaForCausalLM", R"(,"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,
    "high_freq_factor":4})"),
                "original_max_position_embeddings");
  ExpectInvalid(Base("LlamaForCausalLM", R"(,"rope_scaling":"linear")"), "must be an object");
}

TEST(ModelConfig, SlidingWindowOnlyWhenItCannotMatter) {
  EXPECT_TRUE(Parse(Base("Qwen2ForCausalLM", R"(,"use_sliding_window":false,"sliding_window":4)")).ok());
  ExpectInvalid(Base("MistralForCausalLM", R"(,"sliding_window":4,"max_position_embeddings":32)"), "sliding_window",
                ErrorCode::kUnimplemented);
  EXPECT_TRUE(Parse(Base("MistralForCausalLM", R"(,"sliding_window":null)")).ok());
}

}  // namespace
}  // namespace ropeserve
