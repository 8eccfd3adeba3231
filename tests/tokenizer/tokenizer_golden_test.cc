// Golden tests: every string of the reference corpus through each real
// tokenizer, compared with the Hugging Face tokenizers library's output
// (tests/data/golden/tokenizers_<name>.json; see tests/data/README.md).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "server/tokenizer/tokenizer.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::tok {
namespace {

using nlohmann::json;

json ReadGolden(const std::string& name) {
  std::ifstream in(std::string(ROPESERVE_TEST_DATA) + "/golden/tokenizers_" + name + ".json");
  return json::parse(in);
}

std::shared_ptr<const Tokenizer> Load(const std::string& name) {
  auto t = Tokenizer::FromPath(std::string(ROPESERVE_TEST_DATA) + "/tokenizers/" + name);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : nullptr;
}

json OffsetsJson(const Encoding& e) {
  json a = json::array();
  for (const auto& o : e.offsets) a.push_back({o.start, o.end});
  return a;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, EncodeAndDecodeMatchReference) {
  const std::string name = GetParam();
  auto tok = Load(name);
  ASSERT_NE(tok, nullptr);
  const json golden = ReadGolden(name);
  int failures = 0;
  for (const json& item : golden["items"]) {
    const std::string text = item["text"];
    SCOPED_TRACE("item " + item["id"].dump() + ": " + json(text).dump());
    auto plain = tok->Encode(text, false);
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    auto with = tok->Encode(text, true);
    ASSERT_TRUE(with.ok()) << with.status().ToString();
    const bool ok_ids = json(plain->ids) == item["ids"];
    const bool ok_tokens = json(plain->tokens) == item["tokens"];
    const bool ok_offsets = OffsetsJson(*plain) == item["offsets"];
    const bool ok_ids_s = json(with->ids) == item["ids_with_special"];
    const bool ok_offsets_s = OffsetsJson(*with) == item["offsets_with_special"];
    std::vector<int> mask(with->special_tokens_mask.begin(), with->special_tokens_mask.end());
    const bool ok_mask = json(mask) == item["special_tokens_mask_with_special"];
    EXPECT_TRUE(ok_ids) << "ids " << json(plain->ids).dump() << "\n want " << item["ids"].dump();
    EXPECT_TRUE(ok_tokens) << "tokens " << json(plain->tokens).dump() << "\n want " << item["tokens"].dump();
    EXPECT_TRUE(ok_offsets) << "offsets " << OffsetsJson(*plain).dump() << "\n want " << item["offsets"].dump();
    EXPECT_TRUE(ok_ids_s) << "ids_with_special " << json(with->ids).dump();
    EXPECT_TRUE(ok_offsets_s) << "offsets_with_special " << OffsetsJson(*with).dump();
    EXPECT_TRUE(ok_mask);
    for (const auto& [ids_key, suffix] :
         {std::pair<std::string, std::string>{"ids", "ids"}, {"ids_with_special", "ids_with_special"}}) {
      const std::vector<TokenId> ids = item[ids_key].get<std::vector<TokenId>>();
      for (bool skip : {false, true}) {
        auto text_out = tok->Decode(ids, skip);
        ASSERT_TRUE(text_out.ok()) << text_out.status().ToString();
        const std::string key = "decode_" + suffix + "_skip_special_" + (skip ? "true" : "false");
        EXPECT_EQ(*text_out, item[key].get<std::string>()) << key;
        failures += *text_out != item[key].get<std::string>();
      }
    }
    failures += !(ok_ids && ok_tokens && ok_offsets && ok_ids_s && ok_offsets_s && ok_mask);
    if (failures > 8) FAIL() << "stopping after 8 failing items";
  }
}

// Fed one id at a time, the incremental decoder's pieces concatenate to the
// full decode and never end inside a UTF-8 character.
TEST_P(GoldenTest, IncrementalDecodeConcatenatesToFullDecode) {
  const std::string name = GetParam();
  auto tok = Load(name);
  ASSERT_NE(tok, nullptr);
  const json golden = ReadGolden(name);
  for (const json& item : golden["items"]) {
    SCOPED_TRACE("item " + item["id"].dump());
    for (bool skip : {false, true}) {
      const auto ids = item["ids_with_special"].get<std::vector<TokenId>>();
      IncrementalDecoder dec(tok, skip);
      std::string joined;
      for (TokenId id : ids) {
        auto piece = dec.Push(id);
        ASSERT_TRUE(piece.ok()) << piece.status().ToString();
        EXPECT_EQ(FindInvalidUtf8(*piece), std::string::npos);
        joined += *piece;
      }
      auto rest = dec.Finish();
      ASSERT_TRUE(rest.ok()) << rest.status().ToString();
      joined += *rest;
      auto full = tok->Decode(ids, skip);
      ASSERT_TRUE(full.ok());
      EXPECT_EQ(joined, *full);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTest, ::testing::Values("llama2", "llama3", "qwen3"));

}  // namespace
}  // namespace ropeserve::tok
