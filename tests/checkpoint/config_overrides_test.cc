// serve --hf-overrides: NAME=JSON parsing, and the overlay directory that
// presents a checkpoint with config.json's keys replaced (vLLM's
// hf_overrides), its other files reached through links, gone afterwards.
#include "server/checkpoint/config_overrides.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/checkpoint/test_checkpoints.h"

namespace ropeserve {
namespace {

namespace fs = std::filesystem;

TEST(ConfigOverrides, ParsesNameEqualsJsonObject) {
  auto ok = ParseNamedOverrides(R"(rr={"architectures": ["Qwen3ForSequenceClassification"], "x": 1})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->first, "rr");
  EXPECT_EQ(ok->second["x"], 1);
  EXPECT_FALSE(ParseNamedOverrides("rr").ok());
  EXPECT_FALSE(ParseNamedOverrides(R"(={"x": 1})").ok());
  EXPECT_FALSE(ParseNamedOverrides("rr=[1, 2]").ok());
  EXPECT_FALSE(ParseNamedOverrides("rr={not json").ok());
}

TEST(ConfigOverrides, OverlayReplacesKeysAndLinksTheRest) {
  testing::ScratchDir dir;
  testing::WriteJson(dir / "config.json", {{"architectures", {"Qwen3ForCausalLM"}}, {"vocab_size", 9}});
  testing::WriteFile(dir / "model.safetensors", "weights");
  fs::create_directories(dir / "1_Pooling");
  testing::WriteFile(dir / "1_Pooling/config.json", "{}");
  std::string path;
  {
    auto o = ConfigOverlay::Create(
        dir.path(), {{"architectures", {"Qwen3ForSequenceClassification"}}, {"classifier_from_token", {"no", "yes"}}});
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    path = o->path();
    const nlohmann::json merged = testing::ReadJson(path + "/config.json");
    EXPECT_EQ(merged["architectures"][0], "Qwen3ForSequenceClassification");
    EXPECT_EQ(merged["vocab_size"], 9);  // kept
    EXPECT_EQ(merged["classifier_from_token"][1], "yes");
    EXPECT_EQ(testing::ReadFile(path + "/model.safetensors"), "weights");
    EXPECT_TRUE(fs::exists(path + "/1_Pooling/config.json"));
    // The checkpoint itself is untouched.
    EXPECT_EQ(testing::ReadJson(dir / "config.json")["architectures"][0], "Qwen3ForCausalLM");
  }
  EXPECT_FALSE(fs::exists(path));                      // the overlay is removed
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));  // not what it linked to
  // A linked directory: the link goes, the walk does not enter it.
  EXPECT_TRUE(fs::exists(dir / "1_Pooling/config.json"));
  EXPECT_FALSE(ConfigOverlay::Create(dir.path(), nlohmann::json::array()).ok());
  testing::ScratchDir empty;
  EXPECT_FALSE(ConfigOverlay::Create(empty.path(), nlohmann::json::object()).ok());
}

}  // namespace
}  // namespace ropeserve
