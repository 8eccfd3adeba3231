// Components the real tokenizers do not use (WordPiece, Unigram,
// WordLevel, BERT normalizer/pre-tokenizer, Metaspace, RoBERTa processing,
// StripAccents, Digits, Punctuation, ...) and question/context pairs with
// truncation, stride and overflowing windows, against the Hugging Face
// tokenizers library (golden files made by tests/tools/make_tokenizer_golden.js).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "server/tokenizer/tokenizer.h"

namespace ropeserve::tok {
namespace {

using nlohmann::json;

json Read(const std::string& rel) {
  std::ifstream in(std::string(ROPESERVE_TEST_DATA) + "/" + rel);
  return json::parse(in);
}

std::shared_ptr<const Tokenizer> Load(const std::string& rel) {
  auto t = Tokenizer::FromPath(std::string(ROPESERVE_TEST_DATA) + "/" + rel);
  EXPECT_TRUE(t.ok()) << rel << ": " << t.status().ToString();
  return t.ok() ? *t : nullptr;
}

json ToJson(const Encoding& e) {
  json offs = json::array();
  for (const auto& o : e.offsets) offs.push_back({o.start, o.end});
  std::vector<int> mask(e.special_tokens_mask.begin(), e.special_tokens_mask.end());
  json over = json::array();
  for (const auto& o : e.overflowing) over.push_back(ToJson(o));
  return {{"ids", e.ids},
          {"type_ids", e.type_ids},
          {"offsets", offs},
          {"special_tokens_mask", mask},
          {"sequence_ids", e.sequence_ids},
          {"overflowing", over}};
}

class SyntheticTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SyntheticTest, MatchesReference) {
  const json golden = Read("golden/synthetic_" + GetParam() + ".json");
  auto tok = Load(golden["meta"]["tokenizer"]);
  ASSERT_NE(tok, nullptr);
  int failures = 0;
  for (const json& item : golden["items"]) {
    const std::string text = item["text"];
    SCOPED_TRACE(json(text).dump());
    auto plain = tok->Encode(text, false);
    auto with = tok->Encode(text, true);
    ASSERT_TRUE(plain.ok() && with.ok()) << plain.status().ToString() << with.status().ToString();
    const json p = ToJson(*plain), w = ToJson(*with);
    EXPECT_EQ(p, item["plain"]);
    EXPECT_EQ(w, item["with_special"]);
    auto d = tok->Decode(item["with_special"]["ids"].get<std::vector<TokenId>>(), false);
    auto ds = tok->Decode(item["with_special"]["ids"].get<std::vector<TokenId>>(), true);
    ASSERT_TRUE(d.ok() && ds.ok());
    EXPECT_EQ(*d, item["decode"].get<std::string>());
    EXPECT_EQ(*ds, item["decode_skip"].get<std::string>());
    failures += p != item["plain"] || w != item["with_special"] || json(*d) != item["decode"] ||
                json(*ds) != item["decode_skip"];
    if (failures > 5) FAIL() << "stopping after 5 failing items";
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, SyntheticTest,
                         ::testing::Values("bert", "bert_processing", "unigram", "roberta", "wordlevel"));

TEST(EncodePair, TruncationStrideAndOverflowMatchReference) {
  const json golden = Read("golden/encode_pair.json");
  std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  int failures = 0, checked = 0;
  for (const json& c : golden["cases"]) {
    const std::string dir = c["tokenizer"];
    if (!cache.count(dir)) cache[dir] = Load(dir);
    auto tok = cache[dir];
    ASSERT_NE(tok, nullptr);
    Truncation t;
    t.max_length = c["truncation"]["max_length"];
    t.stride = c["truncation"]["stride"];
    const std::string s = c["truncation"]["strategy"];
    t.strategy = s == "OnlySecond"  ? TruncationStrategy::kOnlySecond
                 : s == "OnlyFirst" ? TruncationStrategy::kOnlyFirst
                                    : TruncationStrategy::kLongestFirst;
    t.direction = c["truncation"]["direction"] == "Left" ? TruncationDirection::kLeft : TruncationDirection::kRight;
    SCOPED_TRACE(dir + " " + c["truncation"].dump() + " q=" + c["question"].dump());
    auto e = tok->EncodePair(c["question"].get<std::string>(), c["context"].get<std::string>(), true, t);
    if (c.contains("error")) {
      EXPECT_FALSE(e.ok()) << "reference failed with: " << c["error"];
    } else {
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      const json got = ToJson(*e);
      EXPECT_EQ(got, c["encoding"]);
      failures += got != c["encoding"];
    }
    ++checked;
    if (failures > 5) FAIL() << "stopping after 5 failing cases";
  }
  EXPECT_EQ(checked, 210);
}

// Word ids (the pre-tokenizer split of each token) as the reference's
// Encoding.getWordIds(), for single texts and pairs.
TEST(EncodingWords, MatchReference) {
  const json golden = Read("golden/encoding_words.json");
  std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  int failures = 0;
  for (const json& c : golden["cases"]) {
    const std::string dir = c["tokenizer"];
    if (!cache.count(dir)) cache[dir] = Load(dir);
    ASSERT_NE(cache[dir], nullptr) << dir;
    auto e = c.contains("second") ? cache[dir]->EncodePair(c["first"].get<std::string>(),
                                                           c["second"].get<std::string>(), true, std::nullopt)
                                  : cache[dir]->Encode(c["first"].get<std::string>(), true);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    const auto want = c["words"].get<std::vector<std::int64_t>>();
    EXPECT_EQ(e->words, want) << dir << " " << c["first"].dump();
    failures += e->words != want;
    if (failures > 5) FAIL() << "stopping after 5 failing cases";
  }
  EXPECT_EQ(golden["cases"].size(), 300u);
}

}  // namespace
}  // namespace ropeserve::tok
