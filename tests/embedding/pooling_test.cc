// Sentence-embedding pooling and sentence-transformers metadata
// (server/embedding/pooling.h), against values worked out by hand.
#include "server/embedding/pooling.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/common/scratch_dir.h"

namespace ropeserve::embedding {
namespace {

// 3 tokens x 2 dimensions.
const std::vector<float> kHidden = {1,  -2,  //
                                    3,  4,   //
                                    -5, 0.5f};

TEST(Pool, EachModeAsSentenceTransformers) {
  EXPECT_EQ(Pool(kHidden, 3, 2, Pooling::kCls), (std::vector<float>{1, -2}));
  EXPECT_EQ(Pool(kHidden, 3, 2, Pooling::kLastToken), (std::vector<float>{-5, 0.5f}));
  EXPECT_EQ(Pool(kHidden, 3, 2, Pooling::kMax), (std::vector<float>{3, 4}));
  EXPECT_EQ(Pool(kHidden, 3, 2, Pooling::kMean), (std::vector<float>{-1.0f / 3, 2.5f / 3}));
  // The prompt's tokens left out (include_prompt false): mean and max only.
  EXPECT_EQ(Pool(kHidden, 3, 2, Pooling::kMean, 1), (std::vector<float>{-1, 2.25f}));
  EXPECT_EQ(Pool(kHidden, 3, 2, Pooling::kMax, 2), (std::vector<float>{-5, 0.5f}));
  EXPECT_EQ(Pool(kHidden, 3, 2, Pooling::kCls, 2), (std::vector<float>{1, -2}));
  // A prompt as long as the input still pools its last token.
  EXPECT_EQ(Pool(kHidden, 3, 2, Pooling::kMean, 7), (std::vector<float>{-5, 0.5f}));
}

TEST(Pool, MeanSumsInDoublePrecision) {
  // 2^24 + 1 is not a float32: a float32 running sum of these would drift.
  std::vector<float> rows;
  for (int i = 0; i < 1000; ++i) rows.push_back(i % 2 == 0 ? 16777216.0f : 2.0f);
  EXPECT_EQ(Pool(rows, 1000, 1, Pooling::kMean)[0], static_cast<float>((500.0 * 16777216 + 500.0 * 2) / 1000));
}

TEST(Normalize, UnitLengthAndZeroStaysZero) {
  std::vector<float> v = {3, 4};
  Normalize(v);
  EXPECT_EQ(v, (std::vector<float>{0.6f, 0.8f}));
  std::vector<float> zero = {0, 0};
  Normalize(zero);
  EXPECT_EQ(zero, (std::vector<float>{0, 0}));
}

TEST(Truncate, KeepsTheFirstValuesWithinRange) {
  std::vector<float> v = {1, 2, 3};
  EXPECT_TRUE(Truncate(v, 2).ok());
  EXPECT_EQ(v, (std::vector<float>{1, 2}));
  EXPECT_EQ(Truncate(v, 3).param(), "dimensions");
  EXPECT_FALSE(Truncate(v, 0).ok());
}

TEST(ParsePooling, NamesRoundTrip) {
  for (Pooling p : {Pooling::kCls, Pooling::kMean, Pooling::kMax, Pooling::kLastToken})
    EXPECT_EQ(*ParsePooling(PoolingName(p)), p);
  EXPECT_EQ(*ParsePooling("last"), Pooling::kLastToken);
  EXPECT_FALSE(ParsePooling("sum").ok());
}

class Metadata : public ::testing::Test {
 protected:
  void Write(const std::string& name, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(dir_ / name).parent_path());
    std::ofstream(dir_ / name) << text;
  }
  void Modules(const std::string& extra = "") {
    Write("modules.json",
          R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
              {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"})" +
              extra + "]");
  }
  testing::ScratchDir dir_;
};

TEST_F(Metadata, DefaultsWithoutSentenceTransformersFiles) {
  auto c = LoadEmbeddingConfig(dir_.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->pooling, Pooling::kMean);
  EXPECT_FALSE(c->normalize);
  EXPECT_EQ(c->source, "default");
  EXPECT_FALSE(c->max_seq_length);
}

TEST_F(Metadata, ReadsPoolingNormalizePromptsAndMaxLength) {
  Modules(R"(,{"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"})");
  Write("1_Pooling/config.json",
        R"({"word_embedding_dimension": 8, "pooling_mode_cls_token": false, "pooling_mode_lasttoken": true,
            "include_prompt": false})");
  Write("config_sentence_transformers.json",
        R"({"prompts": {"query": "Instruct: find\nQuery:", "document": ""}, "default_prompt_name": "query"})");
  Write("sentence_bert_config.json", R"({"max_seq_length": 512, "do_lower_case": false})");
  auto c = LoadEmbeddingConfig(dir_.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->pooling, Pooling::kLastToken);
  EXPECT_FALSE(c->include_prompt);
  EXPECT_TRUE(c->normalize);
  EXPECT_EQ(c->prompts.at("query"), "Instruct: find\nQuery:");
  EXPECT_EQ(c->default_prompt_name, "query");
  EXPECT_EQ(c->max_seq_length, 512);
  EXPECT_EQ(c->source, "sentence-transformers");
}

TEST_F(Metadata, WhatIsNotComputedIsRefusedByName) {
  Modules();
  auto expect = [&](ErrorCode code, const std::string& words) {
    auto c = LoadEmbeddingConfig(dir_.path());
    EXPECT_EQ(c.status().code(), code) << c.status().ToString();
    EXPECT_NE(c.status().message().find(words), std::string::npos) << c.status().ToString();
  };
  Write("1_Pooling/config.json", R"({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true})");
  expect(ErrorCode::kUnimplemented, "several pooling modes");
  Write("1_Pooling/config.json", R"({"pooling_mode_mean_sqrt_len_tokens": true})");
  expect(ErrorCode::kUnimplemented, "pooling_mode_mean_sqrt_len_tokens");
  Write("1_Pooling/config.json", R"({"pooling_mode_cls_token": false})");
  expect(ErrorCode::kInvalidArgument, "no pooling_mode");
  Write("1_Pooling/config.json", R"({"pooling_mode_cls_token": "yes"})");
  expect(ErrorCode::kInvalidArgument, "pooling_mode_cls_token");
  Write("1_Pooling/config.json", R"({"pooling_mode_cls_token": true})");
  Modules(R"(,{"idx":2,"name":"2","path":"2_Dense","type":"sentence_transformers.models.Dense"})");
  expect(ErrorCode::kUnimplemented, "sentence_transformers.models.Dense");
  Write("modules.json", R"([{"idx":1,"name":"1","path":"../etc","type":"sentence_transformers.models.Pooling"}])");
  expect(ErrorCode::kInvalidArgument, "'path'");
  Write("modules.json", R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"}])");
  expect(ErrorCode::kUnimplemented, "no Pooling module");
  Write("modules.json", "{not json");
  expect(ErrorCode::kInvalidArgument, "modules.json");
  Modules();
  Write("config_sentence_transformers.json", R"({"prompts": {"q": 1}})");
  expect(ErrorCode::kInvalidArgument, "prompt 'q'");
  Write("config_sentence_transformers.json", R"({"prompts": {"q": ""}, "default_prompt_name": "x"})");
  expect(ErrorCode::kInvalidArgument, "default_prompt_name");
  Write("config_sentence_transformers.json", "{}");
  Write("sentence_bert_config.json", R"({"max_seq_length": 0})");
  expect(ErrorCode::kInvalidArgument, "max_seq_length");
}

}  // namespace
}  // namespace ropeserve::embedding
