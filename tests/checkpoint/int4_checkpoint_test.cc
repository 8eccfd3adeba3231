// quantization_config of GPTQ, AWQ and compressed-tensors checkpoints:
// what `make-model --int4-format` writes opens with the documented tensor
// names, shapes and dtypes; every unsupported variant is refused with an
// error naming its field; damaged 4-bit tensors are refused by name.
#include "server/checkpoint/int4_checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "server/checkpoint/checkpoint.h"
#include "tests/checkpoint/test_checkpoints.h"

namespace ropeserve {
namespace {

using json = nlohmann::json;
using testing::ScratchDir;

Int4Checkpoint Format(Int4Format format, std::int64_t group, bool symmetric = true, bool act_order = false) {
  Int4Checkpoint q;
  q.format = format;
  q.group_size = group;
  q.symmetric = symmetric;
  q.act_order = act_order;
  q.zeros_minus_one = format == Int4Format::kGptq;
  return q;
}

void MakeInt4(const std::string& dir, const Int4Checkpoint& q, const std::string& arch = "llama") {
  auto o = testing::TinyOptions(arch);
  o.intermediate_size = 192;
  o.int4 = q;
  testing::MakeTinyCheckpoint(dir, o);
}

const TensorInfo* Info(const Checkpoint& c, const std::string& name) {
  const auto* ref = c.Find(name);
  return ref == nullptr ? nullptr : ref->info;
}

TEST(Int4Checkpoint, EachFormatHasTheExportersTensors) {
  const std::string m = "model.layers.1.mlp.down_proj";  // [64, 192]
  {
    ScratchDir dir;
    MakeInt4(dir.path(), Format(Int4Format::kGptq, 64, true, true));
    auto c = Checkpoint::Open(dir.path());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_NE(Info(**c, m + ".qweight"), nullptr);
    EXPECT_EQ(Info(**c, m + ".qweight")->shape, (std::vector<std::int64_t>{24, 64}));
    EXPECT_EQ(Info(**c, m + ".qweight")->dtype, DType::kI32);
    EXPECT_EQ(Info(**c, m + ".qzeros")->shape, (std::vector<std::int64_t>{3, 8}));
    EXPECT_EQ(Info(**c, m + ".scales")->dtype, DType::kF16);
    EXPECT_EQ(Info(**c, m + ".g_idx")->shape, (std::vector<std::int64_t>{192}));
    EXPECT_EQ(Info(**c, m + ".weight"), nullptr);
    EXPECT_TRUE((*c)->config().int4_weights->act_order);
  }
  {
    ScratchDir dir;
    MakeInt4(dir.path(), Format(Int4Format::kAwq, 32, false));
    auto c = Checkpoint::Open(dir.path());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(Info(**c, m + ".qweight")->shape, (std::vector<std::int64_t>{192, 8}));
    EXPECT_EQ(Info(**c, m + ".qzeros")->shape, (std::vector<std::int64_t>{6, 8}));
    EXPECT_EQ(Info(**c, m + ".scales")->shape, (std::vector<std::int64_t>{6, 64}));
  }
  {
    ScratchDir dir;
    MakeInt4(dir.path(), Format(Int4Format::kCompressedTensors, 32, false, true));
    auto c = Checkpoint::Open(dir.path());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(Info(**c, m + ".weight_packed")->shape, (std::vector<std::int64_t>{64, 24}));
    EXPECT_EQ(Info(**c, m + ".weight_scale")->shape, (std::vector<std::int64_t>{64, 6}));
    EXPECT_EQ(Info(**c, m + ".weight_zero_point")->shape, (std::vector<std::int64_t>{8, 6}));
    EXPECT_EQ(Info(**c, m + ".weight_g_idx")->shape, (std::vector<std::int64_t>{192}));
    EXPECT_EQ(Info(**c, m + ".weight_shape")->dtype, DType::kI64);
  }
  {  // symmetric compressed-tensors: no zero points; a channel scale
    ScratchDir dir;
    MakeInt4(dir.path(), Format(Int4Format::kCompressedTensors, -1));
    auto c = Checkpoint::Open(dir.path());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(Info(**c, m + ".weight_zero_point"), nullptr);
    EXPECT_EQ(Info(**c, m + ".weight_scale")->shape, (std::vector<std::int64_t>{64, 1}));
  }
}

// config.json's quantization_config replaced by `q`: the error names `want`.
void ExpectRefused(const json& q, const std::vector<std::string>& want, const std::string& arch = "llama") {
  ScratchDir dir;
  MakeInt4(dir.path(), Format(Int4Format::kGptq, 32), arch);
  json config = testing::ReadJson(dir / "config.json");
  config["quantization_config"] = q;
  testing::WriteJson(dir / "config.json", config);
  auto c = Checkpoint::Open(dir.path());
  ASSERT_FALSE(c.ok()) << q.dump();
  for (const auto& w : want) EXPECT_NE(c.status().message().find(w), std::string::npos) << c.status().ToString();
}

json Gptq() { return json::parse(Int4QuantizationConfigJson(Format(Int4Format::kGptq, 32))); }
json Awq() { return json::parse(Int4QuantizationConfigJson(Format(Int4Format::kAwq, 32, false))); }
json Ct() { return json::parse(Int4QuantizationConfigJson(Format(Int4Format::kCompressedTensors, 32))); }
json& CtWeights(json& j) { return j["config_groups"]["group_0"]["weights"]; }

TEST(Int4Checkpoint, UnsupportedVariantsAreRefusedByField) {
  json j = Gptq();
  ExpectRefused((j["quant_method"] = "bitsandbytes", j), {"'quant_method'", "bitsandbytes"});
  j = Gptq();
  ExpectRefused((j["bits"] = 8, j), {"'bits'", "only 4-bit"});
  j = Gptq();
  ExpectRefused((j["checkpoint_format"] = "marlin", j), {"'checkpoint_format'", "marlin"});
  j = Gptq();
  ExpectRefused((j["lm_head"] = true, j), {"'lm_head'"});
  j = Gptq();
  ExpectRefused((j["group_size"] = 16, j), {"groups of 16", "multiple of 32"});
  j = Gptq();
  ExpectRefused((j["group_size"] = 0, j), {"'group_size'"});
  j = Gptq();
  ExpectRefused((j["modules_in_block_to_quantize"] = json::array({json::array({"self_attn.q_proj"})}), j),
                {"'modules_in_block_to_quantize'", "self_attn.k_proj"});
  j = Awq();
  ExpectRefused((j["version"] = "GEMV", j), {"'version'", "gemv"});
  j = Awq();
  ExpectRefused((j["zero_point"] = false, j), {"'zero_point'"});
  j = Awq();
  ExpectRefused((j["modules_to_not_convert"] = json::array({"down_proj"}), j),
                {"model.layers.0.mlp.down_proj", "floating point"});
  j = Ct();
  ExpectRefused((j["format"] = "float-quantized", j), {"'format'", "float-quantized"});
  j = Ct();
  ExpectRefused((j["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}}, j), {"'input_activations'"});
  j = Ct();
  ExpectRefused((CtWeights(j)["strategy"] = "tensor", j), {"'strategy'", "tensor"});
  j = Ct();
  ExpectRefused((CtWeights(j)["type"] = "float", j), {"'type'"});
  j = Ct();
  ExpectRefused((j["config_groups"]["group_1"] = j["config_groups"]["group_0"], j), {"'config_groups'"});
  j = Ct();
  ExpectRefused((j["ignore"] = json::array({"lm_head", "re:.*mlp\\.down_proj$"}), j),
                {"model.layers.0.mlp.down_proj", "floating point"});
  j = Ct();
  ExpectRefused((j["ignore"] = json::array({"re:(unclosed"}), j), {"'ignore'", "regular expression"});
  j = Ct();
  ExpectRefused((j["quantization_status"] = "frozen", j), {"'quantization_status'"});
}

TEST(Int4Checkpoint, IgnoreListsNamingOtherModulesAreFine) {
  ScratchDir dir;
  MakeInt4(dir.path(), Format(Int4Format::kCompressedTensors, 32));
  json config = testing::ReadJson(dir / "config.json");
  config["quantization_config"]["ignore"] = json::array({"lm_head", "re:visual.*", "re:.*mlp\\.gate$"});
  testing::WriteJson(dir / "config.json", config);
  auto c = Checkpoint::Open(dir.path());
  EXPECT_TRUE(c.ok()) << c.status().ToString();
}

void EditTensors(const std::string& dir, const std::function<void(std::vector<TensorToWrite>&)>& edit) {
  testing::Rewrite(dir + "/model.safetensors", edit);
}

TEST(Int4Checkpoint, WrongDtypeAndMissingTensorsAreNamed) {
  ScratchDir dir;
  MakeInt4(dir.path(), Format(Int4Format::kGptq, 32));
  EditTensors(dir.path(), [](auto& ts) {
    for (auto& t : ts)
      if (t.name == "model.layers.0.mlp.down_proj.qweight") t.dtype = DType::kF32;  // same bytes, wrong type
  });
  auto c = Checkpoint::Open(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("down_proj.qweight' has dtype F32 (supported: I32)"), std::string::npos)
      << c.status().ToString();
  EditTensors(dir.path(), [](auto& ts) {
    std::erase_if(ts, [](const auto& t) { return t.name == "model.layers.0.mlp.up_proj.qzeros"; });
  });
  c = Checkpoint::Open(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("missing tensor 'model.layers.0.mlp.up_proj.qzeros' required by "
                                      "LlamaForCausalLM (gptq)"),
            std::string::npos)
      << c.status().ToString();
}

// GPTQ exporters write biases for projections that have none; vLLM skips
// them, and so does the loader.
TEST(Int4Checkpoint, GptqExportersExtraBiasesAreSkipped) {
  ScratchDir dir;
  MakeInt4(dir.path(), Format(Int4Format::kGptq, 32));
  EditTensors(dir.path(), [](auto& ts) {
    ts.push_back({"model.layers.0.self_attn.o_proj.bias", DType::kF16, {64}, std::vector<std::uint8_t>(128)});
  });
  EXPECT_TRUE(Checkpoint::Open(dir.path()).ok());
}

}  // namespace
}  // namespace ropeserve
