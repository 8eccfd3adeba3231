// Encoder (span model) config.json parsing with Hugging Face's names and
// defaults, old and new ModernBERT formats, RoFormer, and clear errors.
#include "server/checkpoint/encoder_config.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ropeserve {
namespace {

// ModernBERT-base as published (old format: global_attn_every_n_layers,
// global/local_rope_theta), with a QA head.
constexpr const char* kModernBertBase = R"({
  "architectures": ["ModernBertForQuestionAnswering"], "model_type": "modernbert",
  "vocab_size": 50368, "hidden_size": 768, "intermediate_size": 1152, "num_hidden_layers": 22,
  "num_attention_heads": 12, "hidden_activation": "gelu", "max_position_embeddings": 8192,
  "norm_eps": 1e-05, "norm_bias": false, "global_rope_theta": 160000.0, "local_rope_theta": 10000.0,
  "global_attn_every_n_layers": 3, "local_attention": 128, "cls_token_id": 50281, "sep_token_id": 50282,
  "pad_token_id": 50283, "classifier_activation": "gelu", "classifier_bias": false,
  "id2label": {"0": "LABEL_0", "1": "LABEL_1"}})";

TEST(EncoderConfig, ModernBertOldFormat) {
  auto c = ParseEncoderConfig(kModernBertBase);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, EncoderFamily::kModernBert);
  EXPECT_EQ(c->head_dim, 64);
  ASSERT_EQ(c->global_layers.size(), 22u);
  // Layers 0, 3, 6, ... are global (i % 3 == 0), the others sliding.
  for (std::size_t i = 0; i < 22; ++i) EXPECT_EQ(c->global_layers[i], i % 3 == 0) << i;
  EXPECT_EQ(c->global_rope_theta, 160000.0);
  EXPECT_EQ(c->local_rope_theta, 10000.0);
  EXPECT_EQ(c->local_attention, 128);
  EXPECT_EQ(*c->cls_token_id, 50281);
  EXPECT_EQ(c->num_labels, 2);
}

TEST(EncoderConfig, ModernBertNewFormatAndDefaults) {
  auto c = ParseEncoderConfig(R"({"architectures": ["ModernBertForQuestionAnswering"], "num_hidden_layers": 4,
    "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
    "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 80000.0},
                        "sliding_attention": {"rope_type": "default"}}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->global_layers, (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(c->global_rope_theta, 80000.0);
  EXPECT_EQ(c->local_rope_theta, 10000.0);  // the default
  EXPECT_EQ(c->hidden_size, 768);           // ModernBertConfig's defaults
  EXPECT_EQ(c->intermediate_size, 1152);
  EXPECT_EQ(c->activation, "gelu");
  EXPECT_FALSE(c->norm_bias);
}

TEST(EncoderConfig, RoFormer) {
  auto c = ParseEncoderConfig(R"({"architectures": ["RoFormerForQuestionAnswering"], "vocab_size": 50000,
    "embedding_size": 384, "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 6,
    "intermediate_size": 1536, "hidden_act": "gelu", "max_position_embeddings": 1536, "type_vocab_size": 2,
    "layer_norm_eps": 1e-12, "rotary_value": false, "pad_token_id": 0})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, EncoderFamily::kRoFormer);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->embedding_size, 384);
  EXPECT_EQ(c->type_vocab_size, 2);
  EXPECT_EQ(c->global_layers, std::vector<bool>(6, true));
  EXPECT_FALSE(c->rotary_value);
}

// Base models (what sentence-transformers embedders ship): no head, so no
// labels to check and no head tensors; the trunk's tensors keep the family
// prefix in ExpectedEncoderTensors (loaders also accept them without).
TEST(EncoderConfig, BaseModelsHaveNoHead) {
  std::string base = kModernBertBase;
  base.replace(base.find("ModernBertForQuestionAnswering"), 30, "ModernBertModel");
  base.replace(base.find(R"("id2label")"), std::string(R"("id2label": {"0": "LABEL_0", "1": "LABEL_1"})").size(),
               R"("num_labels": 3)");
  auto c = ParseEncoderConfig(base);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, EncoderFamily::kModernBert);
  EXPECT_EQ(c->head, EncoderHead::kNone);
  auto tensors = ExpectedEncoderTensors(*c);
  EXPECT_EQ(tensors.back().name, "model.final_norm.weight");
  for (const auto& t : tensors) EXPECT_EQ(t.name.rfind(BaseModelPrefix(c->family), 0), 0u) << t.name;
  auto r = ParseEncoderConfig(R"({"architectures": ["RoFormerModel"], "hidden_size": 64,
    "num_attention_heads": 4, "embedding_size": 32})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->head, EncoderHead::kNone);
  EXPECT_EQ(ExpectedEncoderTensors(*r).back().name, "roformer.encoder.layer.11.output.LayerNorm.bias");
  EXPECT_EQ(BaseModelPrefix(r->family), "roformer.");
  auto qa = ParseEncoderConfig(kModernBertBase);
  ASSERT_TRUE(qa.ok());
  EXPECT_EQ(qa->head, EncoderHead::kSpan);
  EXPECT_EQ(ExpectedEncoderTensors(*qa).back().name, "classifier.bias");
}

// Classifiers: id2label in index order (Hugging Face's LABEL_<i> without
// it), the activations vLLM applies (problem_type; a cross-encoder's
// sentence-transformers activation_fn), and each family's head tensors.
TEST(EncoderConfig, Classifiers) {
  auto c = ParseEncoderConfig(R"({"architectures": ["ModernBertForSequenceClassification"],
    "id2label": {"1": "positive", "0": "negative", "2": "neutral"}, "classifier_pooling": "mean"})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->head, EncoderHead::kSequence);
  EXPECT_EQ(c->labels, (std::vector<std::string>{"negative", "positive", "neutral"}));
  EXPECT_EQ(c->classifier_pooling, "mean");
  EXPECT_EQ(c->classify_activation, ScoreActivation::kSoftmax);
  EXPECT_EQ(ExpectedEncoderTensors(*c).back().name, "classifier.bias");
  EXPECT_EQ(ExpectedEncoderTensors(*c).back().shape, (std::vector<std::int64_t>{3}));
  auto multi = ParseEncoderConfig(R"({"architectures": ["RoFormerForSequenceClassification"], "num_labels": 4,
    "problem_type": "multi_label_classification"})");
  ASSERT_TRUE(multi.ok()) << multi.status().ToString();
  EXPECT_EQ(multi->labels, (std::vector<std::string>{"LABEL_0", "LABEL_1", "LABEL_2", "LABEL_3"}));
  EXPECT_EQ(multi->classify_activation, ScoreActivation::kSigmoid);
  EXPECT_EQ(multi->score_activation, ScoreActivation::kSoftmax);
  EXPECT_EQ(ExpectedEncoderTensors(*multi).back().name, "classifier.out_proj.bias");
  auto ce = ParseEncoderConfig(R"({"architectures": ["ModernBertForSequenceClassification"], "num_labels": 1,
    "sentence_transformers": {"activation_fn": "torch.nn.modules.linear.Identity"}})");
  ASSERT_TRUE(ce.ok()) << ce.status().ToString();
  EXPECT_EQ(ce->classify_activation, ScoreActivation::kSigmoid);  // one label
  EXPECT_EQ(ce->score_activation, ScoreActivation::kIdentity);
  auto reg = ParseEncoderConfig(R"({"architectures": ["RoFormerForTokenClassification"], "num_labels": 1,
    "problem_type": "regression"})");
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  EXPECT_EQ(reg->head, EncoderHead::kToken);
  EXPECT_EQ(reg->classify_activation, ScoreActivation::kIdentity);
  EXPECT_EQ(ExpectedEncoderTensors(*reg).back().name, "classifier.bias");
  auto qwen = ParseEncoderConfig(R"({"architectures": ["Qwen3ForSequenceClassification"], "vocab_size": 512,
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "id2label": {"0": "no", "1": "yes"}})");
  ASSERT_TRUE(qwen.ok()) << qwen.status().ToString();
  EXPECT_EQ(qwen->family, EncoderFamily::kDecoder);
  EXPECT_EQ(qwen->head, EncoderHead::kSequence);
  EXPECT_EQ(qwen->labels, (std::vector<std::string>{"no", "yes"}));
  EXPECT_TRUE(qwen->trunk->sequence_head);
  EXPECT_EQ(ExpectedEncoderTensors(*qwen).back().name, "score.weight");
  EXPECT_EQ(ExpectedEncoderTensors(*qwen).back().shape, (std::vector<std::int64_t>{2, 64}));
  EXPECT_EQ(ExpectedEncoderTensors(*qwen).front().name.rfind("model.", 0), 0u);
  // Activations as vLLM applies them.
  std::vector<float> logits = {1.0f, 3.0f};
  ApplyScoreActivation(ScoreActivation::kSoftmax, logits);
  EXPECT_NEAR(logits[1], 1 / (1 + std::exp(-2.0)), 1e-7);
  EXPECT_NEAR(logits[0] + logits[1], 1.0, 1e-7);
  std::vector<float> one = {0.0f};
  ApplyScoreActivation(ScoreActivation::kSigmoid, one);
  EXPECT_EQ(one[0], 0.5f);
}

TEST(EncoderConfig, ClearErrors) {
  struct Case {
    const char* json;
    const char* expect;
  };
  const Case cases[] = {
      {"[]", "JSON object"},
      {R"({"architectures": ["BertForQuestionAnswering"]})", "not a supported encoder"},
      {R"({"architectures": ["ModernBertForQuestionAnswering"], "hidden_size": 100, "num_attention_heads": 12})",
       "multiple of num_attention_heads"},
      {R"({"architectures": ["ModernBertForQuestionAnswering"], "num_hidden_layers": 2, "layer_types": ["full_attention"]})",
       "one kind per layer"},
      {R"({"architectures": ["ModernBertForQuestionAnswering"], "local_attention": 127})", "even"},
      {R"({"architectures": ["ModernBertForQuestionAnswering"], "hidden_activation": "swish2"})", "unsupported"},
      {R"({"architectures": ["ModernBertForQuestionAnswering"], "id2label": {"0": "a", "1": "b", "2": "c"}})",
       "2 labels"},
      {R"({"architectures": ["ModernBertForQuestionAnswering"], "rope_parameters": {"full_attention": {"rope_type": "yarn"}}})",
       "rope type"},
      {R"({"architectures": ["RoFormerForQuestionAnswering"], "num_hidden_layers": 0})", "positive"},
      {R"({"architectures": ["RoFormerForQuestionAnswering"], "vocab_size": "many"})", "integer"},
      {R"({"architectures": ["ModernBertForSequenceClassification"], "id2label": {"zero": "a"}})", "label indices"},
      {R"({"architectures": ["ModernBertForSequenceClassification"], "id2label": {"0": "a", "2": "b"}})",
       "does not name labels 0..1"},
      {R"({"architectures": ["ModernBertForSequenceClassification"], "num_labels": 0})", "1 to 65536 labels"},
      {R"({"architectures": ["ModernBertForSequenceClassification"], "classifier_pooling": "max"})", "cls or mean"},
      {R"({"architectures": ["RoFormerForSequenceClassification"], "problem_type": "ranking"})", "problem_type"},
      {R"({"architectures": ["RoFormerForSequenceClassification"], "sbert_ce_default_activation_function": "os.system"})",
       "activation_fn"},
      {R"({"architectures": ["LlamaForTokenClassification"], "vocab_size": 8, "hidden_size": 8,
           "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2})",
       "not a supported encoder"},
  };
  for (const Case& k : cases) {
    auto c = ParseEncoderConfig(k.json, "cfg.json");
    ASSERT_FALSE(c.ok()) << k.json;
    EXPECT_NE(c.status().message().find(k.expect), std::string::npos) << c.status().ToString();
  }
}

}  // namespace
}  // namespace ropeserve
