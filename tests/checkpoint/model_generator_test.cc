#include "server/checkpoint/model_generator.h"

#include <gtest/gtest.h>

#include "server/checkpoint/checkpoint.h"
#include "tests/checkpoint/test_checkpoints.h"

namespace ropeserve {
namespace {

using testing::ScratchDir;

TEST(ModelGenerator, SameSeedSameBytesOtherSeedOtherBytes) {
  ScratchDir a, b, c;
  auto o = testing::TinyOptions("qwen2");
  testing::MakeTinyCheckpoint(a.path(), o);
  testing::MakeTinyCheckpoint(b.path(), o);
  o.seed = 8;
  testing::MakeTinyCheckpoint(c.path(), o);
  EXPECT_EQ(testing::ReadFile(a / "model.safetensors"), testing::ReadFile(b / "model.safetensors"));
  EXPECT_NE(testing::ReadFile(a / "model.safetensors"), testing::ReadFile(c / "model.safetensors"));
}

TEST(ModelGenerator, EveryArchitectureLoadsBack) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    ScratchDir d;
    testing::MakeTinyCheckpoint(d.path(), testing::TinyOptions(arch));
    auto ckpt = Checkpoint::Open(d.path());
    ASSERT_TRUE(ckpt.ok()) << arch << ": " << ckpt.status().ToString();
  }
}

TEST(ModelGenerator, PresetsHaveTheRealModelsParameterCounts) {
  // Published parameter counts of the models whose shapes the presets copy.
  const std::pair<const char*, std::int64_t> expected[] = {{"qwen2.5-0.5b", 494032768},
                                                           {"llama-3.2-1b", 1235814400},
                                                           {"smollm2-360m", 361821120},
                                                           {"qwen3-0.6b", 596049920}};
  for (auto [preset, params] : expected) {
    MakeModelOptions o;
    o.preset = preset;
    auto text = MakeModelConfigJson(o);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    auto config = ParseModelConfig(*text, preset);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    EXPECT_EQ(config->num_parameters(), params) << preset;
  }
}

TEST(ModelGenerator, TokenizerVocabularyCoversEveryModelId) {
  ScratchDir d;
  testing::MakeTinyCheckpoint(d.path(), testing::TinyOptions("llama"));
  auto tok = testing::ReadJson(d / "tokenizer.json");
  const auto& vocab = tok["model"]["vocab"];
  std::vector<bool> seen(300, false);
  for (const auto& [token, id] : vocab.items()) seen.at(id.get<std::size_t>()) = true;
  for (const auto& added : tok["added_tokens"]) seen.at(added["id"].get<std::size_t>()) = true;
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_TRUE(seen[i]) << "id " << i << " has no token";
  // Every merge joins two tokens that already exist.
  for (const auto& m : tok["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    const auto space = s.find(' ');
    EXPECT_TRUE(vocab.contains(s.substr(0, space)) && vocab.contains(s.substr(space + 1))) << s;
  }
}

TEST(ModelGenerator, RejectsUnknownPresetAndTinyVocab) {
  MakeModelOptions o;
  o.preset = "gpt-5";
  EXPECT_FALSE(MakeModelConfigJson(o).ok());
  o = testing::TinyOptions();
  o.vocab_size = 10;
  EXPECT_FALSE(MakeModelConfigJson(o).ok());
}

}  // namespace
}  // namespace ropeserve
