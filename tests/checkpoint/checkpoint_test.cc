// Checkpoint directories: valid single-file and sharded checkpoints load;
// every kind of bad checkpoint is rejected with an error naming the file and
// the tensor or key.
#include "server/checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "tests/checkpoint/test_checkpoints.h"

namespace ropeserve {
namespace {

using testing::MakeTinyCheckpoint;
using testing::ReadAll;
using testing::ReadJson;
using testing::Rewrite;
using testing::ScratchDir;
using testing::TinyOptions;
using testing::WriteJson;

void ExpectError(const std::string& dir, ErrorCode code, const std::vector<std::string>& parts) {
  auto c = Checkpoint::Open(dir);
  ASSERT_FALSE(c.ok()) << "checkpoint unexpectedly loaded";
  EXPECT_EQ(c.status().code(), code) << c.status().ToString();
  for (const auto& p : parts) EXPECT_NE(c.status().message().find(p), std::string::npos) << c.status().ToString();
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeTinyCheckpoint(dir_.path(), TinyOptions("llama")); }
  std::string weights() const { return dir_ / "model.safetensors"; }
  ScratchDir dir_;
};

TEST_F(CheckpointTest, ValidCheckpointLoads) {
  auto c = Checkpoint::Open(dir_.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const auto& spec : ExpectedTensors((*c)->config())) EXPECT_NE((*c)->Find(spec.name), nullptr) << spec.name;
}

TEST_F(CheckpointTest, MissingTensor) {
  Rewrite(weights(), [](auto& ts) {
    std::erase_if(ts, [](const auto& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
  });
  ExpectError(dir_.path(), ErrorCode::kNotFound, {"missing tensor 'model.layers.1.mlp.up_proj.weight'"});
}

TEST_F(CheckpointTest, UnexpectedTensor) {
  Rewrite(weights(), [](auto& ts) { ts.push_back({"model.layers.9.extra.weight", DType::kF32, {1}, {0, 0, 0, 0}}); });
  ExpectError(dir_.path(), ErrorCode::kInvalidArgument, {weights(), "unexpected tensor 'model.layers.9.extra.weight'"});
}

TEST_F(CheckpointTest, IgnorableRotaryBufferIsAccepted) {
  Rewrite(weights(), [](auto& ts) {
    ts.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", DType::kF32, {1}, {0, 0, 0, 0}});
  });
  EXPECT_TRUE(Checkpoint::Open(dir_.path()).ok());
}

TEST_F(CheckpointTest, WrongShape) {
  Rewrite(weights(), [](auto& ts) {
    for (auto& t : ts)
      if (t.name == "model.layers.0.self_attn.k_proj.weight") {
        t.shape = {64, 64};
        t.bytes.resize(64 * 64 * 4);
      }
  });
  ExpectError(dir_.path(), ErrorCode::kInvalidArgument,
              {weights(), "'model.layers.0.self_attn.k_proj.weight' has shape [64, 64]", "implies [32, 64]"});
}

TEST_F(CheckpointTest, IntegerWeightDtype) {
  Rewrite(weights(), [](auto& ts) {
    for (auto& t : ts)
      if (t.name == "model.norm.weight") t.dtype = DType::kI32;
  });
  ExpectError(dir_.path(), ErrorCode::kUnimplemented, {"'model.norm.weight' has dtype I32"});
}

TEST_F(CheckpointTest, TruncatedWeights) {
  std::string bytes = testing::ReadFile(weights());
  testing::WriteFile(weights(), bytes.substr(0, bytes.size() / 2));
  ExpectError(dir_.path(), ErrorCode::kDataLoss, {weights(), "truncated"});
}

TEST_F(CheckpointTest, UnknownArchitecture) {
  auto j = ReadJson(dir_ / "config.json");
  j["architectures"] = {"GPT2LMHeadModel"};
  WriteJson(dir_ / "config.json", j);
  ExpectError(dir_.path(), ErrorCode::kUnimplemented, {"config.json", "unknown architecture 'GPT2LMHeadModel'"});
}

TEST_F(CheckpointTest, HeadsNotDividingHiddenSize) {
  auto j = ReadJson(dir_ / "config.json");
  j["num_attention_heads"] = 3;
  j["num_key_value_heads"] = 3;
  WriteJson(dir_ / "config.json", j);
  ExpectError(dir_.path(), ErrorCode::kInvalidArgument, {"config.json", "does not divide hidden_size"});
}

TEST_F(CheckpointTest, KvHeadsNotDividingHeads) {
  auto j = ReadJson(dir_ / "config.json");
  j["num_key_value_heads"] = 3;
  WriteJson(dir_ / "config.json", j);
  ExpectError(dir_.path(), ErrorCode::kInvalidArgument, {"num_key_value_heads (3) does not divide"});
}

TEST_F(CheckpointTest, MalformedConfigJson) {
  testing::WriteFile(dir_ / "config.json", "{\"hidden_size\": 64,");
  ExpectError(dir_.path(), ErrorCode::kInvalidArgument, {"config.json", "malformed JSON"});
}

TEST_F(CheckpointTest, MissingConfigJson) {
  std::filesystem::remove(dir_ / "config.json");
  ExpectError(dir_.path(), ErrorCode::kNotFound, {"config.json"});
}

TEST_F(CheckpointTest, NoWeightsFile) {
  std::filesystem::remove(weights());
  ExpectError(dir_.path(), ErrorCode::kNotFound, {"no model.safetensors"});
}

TEST_F(CheckpointTest, GenerationConfigEosListWins) {
  WriteJson(dir_ / "generation_config.json", {{"eos_token_id", {5, 7}}});
  auto c = Checkpoint::Open(dir_.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->config().eos_token_ids, (std::vector<std::int64_t>{5, 7}));
}

TEST_F(CheckpointTest, GenerationConfigEosOutsideVocabulary) {
  WriteJson(dir_ / "generation_config.json", {{"eos_token_id", 100000}});
  ExpectError(dir_.path(), ErrorCode::kInvalidArgument, {"generation_config.json", "outside the vocabulary"});
}

// Splits model.safetensors into two shards plus an index.
void Shard(const std::string& dir) {
  auto ts = ReadAll(dir + "/model.safetensors");
  std::filesystem::remove(dir + "/model.safetensors");
  std::vector<TensorToWrite> a, b;
  nlohmann::json map = nlohmann::json::object();
  for (size_t i = 0; i < ts.size(); ++i) {
    const bool first = i < ts.size() / 2;
    map[ts[i].name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    (first ? a : b).push_back(std::move(ts[i]));
  }
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors", a).ok());
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors", b).ok());
  WriteJson(dir + "/model.safetensors.index.json", {{"metadata", {{"total_size", 0}}}, {"weight_map", map}});
}

TEST_F(CheckpointTest, ShardedCheckpointLoads) {
  Shard(dir_.path());
  auto c = Checkpoint::Open(dir_.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->files().size(), 2u);
}

TEST_F(CheckpointTest, IndexNamesMissingShard) {
  Shard(dir_.path());
  std::filesystem::remove(dir_ / "model-00002-of-00002.safetensors");
  ExpectError(dir_.path(), ErrorCode::kNotFound, {"model-00002-of-00002.safetensors"});
}

TEST_F(CheckpointTest, IndexListsTensorAbsentFromShard) {
  Shard(dir_.path());
  auto j = ReadJson(dir_ / "model.safetensors.index.json");
  j["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
  WriteJson(dir_ / "model.safetensors.index.json", j);
  ExpectError(dir_.path(), ErrorCode::kNotFound, {"'model.norm.weight' listed in"});
}

TEST_F(CheckpointTest, IndexEscapingTheDirectoryIsRejected) {
  Shard(dir_.path());
  auto j = ReadJson(dir_ / "model.safetensors.index.json");
  j["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  WriteJson(dir_ / "model.safetensors.index.json", j);
  ExpectError(dir_.path(), ErrorCode::kInvalidArgument, {"not a file name in the directory"});
}

TEST(Checkpoint, NotADirectory) {
  auto c = Checkpoint::Open("/nonexistent/model");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace ropeserve
