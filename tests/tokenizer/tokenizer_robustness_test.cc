// Bad and extreme input: invalid UTF-8, very large inputs, a million-
// character word, control characters, unknown ids, malformed tokenizer.json.
// None may crash, hang or take super-linear time.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "server/tokenizer/tokenizer.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::tok {
namespace {

using nlohmann::json;

std::string Data(const std::string& rel) { return std::string(ROPESERVE_TEST_DATA) + "/" + rel; }

std::shared_ptr<const Tokenizer> Load(const std::string& rel) {
  auto t = Tokenizer::FromPath(Data(rel));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : nullptr;
}

TEST(TokenizerInput, InvalidUtf8IsRejectedWithByteOffset) {
  auto t = Load("tokenizers/qwen3");
  for (const std::string& bad : {std::string("ab\xff"), std::string("\xc3"), std::string("\xed\xa0\x80"),
                                 std::string("\xf4\x90\x80\x80"), std::string("ok \xc0\xaf")}) {
    auto e = t->Encode(bad, false);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("not valid UTF-8"), std::string::npos) << e.status().message();
  }
  auto pair = t->EncodePair("ok", "bad\xfe", true, std::nullopt);
  EXPECT_FALSE(pair.ok());
}

TEST(TokenizerInput, ControlCharactersAndNulRoundTrip) {
  auto t = Load("tokenizers/llama3");
  const std::string s("a\0b\x01\x1f\x7f\t\r\n\xc2\x85 \xe2\x80\xa8z", 17);
  auto e = t->Encode(s, false);
  ASSERT_TRUE(e.ok());
  auto d = t->Decode(e->ids, false);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, s);
}

TEST(TokenizerInput, TenMegabytesInOneCall) {
  auto t = Load("tokenizers/llama3");
  std::ifstream in(Data("golden/tokenizer_corpus.json"));
  const json corpus = json::parse(in);
  std::string big;
  for (size_t k = 0; big.size() < 10u << 20; ++k)
    big += corpus["items"][k % corpus["items"].size()]["text"].get<std::string>() + "\n";
  auto e = t->Encode(big, false);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_GT(e->ids.size(), 1000000u);
  EXPECT_EQ(e->offsets.back().end, CountCodePoints(big));  // the last token ends the text
  auto d = t->Decode(e->ids, false);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(*d == big);
}

TEST(TokenizerInput, MillionCharacterWordInEveryModel) {
  const std::string word(1000000, 'a');
  std::string cjk;
  for (int k = 0; k < 300'000; ++k) cjk += "\xe4\xb8\xad";  // 中
  std::string marks = "e";
  for (int k = 0; k < 200'000; ++k) marks += "\xcc\x81";  // combining acute: NFC composes only the first
  for (const char* name :
       {"tokenizers/llama3", "tokenizers/qwen3", "tokenizers/llama2", "tokenizers/synthetic/bert",
        "tokenizers/synthetic/unigram", "tokenizers/synthetic/roberta", "tokenizers/synthetic/wordlevel"}) {
    SCOPED_TRACE(name);
    auto t = Load(name);
    for (const std::string* s :
         {&word, static_cast<const std::string*>(&cjk), static_cast<const std::string*>(&marks)}) {
      auto e = t->Encode(*s, true);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      EXPECT_FALSE(e->ids.empty());
      ASSERT_TRUE(t->Decode(e->ids, true).ok());
    }
  }
}

TEST(TokenizerInput, EmptyAndWhitespaceOnly) {
  for (const char* name : {"tokenizers/llama3", "tokenizers/qwen3", "tokenizers/llama2", "tokenizers/synthetic/bert"}) {
    auto t = Load(name);
    for (const std::string s : {"", " ", "\n\n", "\t \u3000"}) {
      auto e = t->Encode(s, true);
      ASSERT_TRUE(e.ok()) << name;
    }
  }
}

TEST(TokenizerDecode, UnknownIdsAreErrors) {
  auto t = Load("tokenizers/qwen3");
  auto d = t->Decode({9707, static_cast<TokenId>(t->VocabSize())}, false);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("not in the vocabulary"), std::string::npos);
  EXPECT_TRUE(t->Decode({}, false).ok());
  // TokenId is signed: a negative id is no token of any model.
  for (TokenId bad : {-1, -9707, INT32_MIN}) {
    EXPECT_FALSE(t->Decode({9707, bad}, false).ok()) << bad;
    EXPECT_EQ(t->IdToToken(bad), nullptr);
    EXPECT_FALSE(t->TokenBytes(bad).has_value());
  }
}

// A model with more embedding rows than the tokenizer has ids can sample
// one of the extra ids: it decodes to nothing, and the text around it is
// what it would be without it.
TEST(IncrementalDecoder, IdsOutsideTheTokenizerDecodeToNothing) {
  std::shared_ptr<const Tokenizer> t = Load("tokenizers/qwen3");
  const auto outside = static_cast<TokenId>(t->VocabSize() + 5);
  IncrementalDecoder with(t, true), without(t, true);
  std::string a, b;
  for (TokenId id : {9707, outside, 1879}) {
    auto piece = with.Push(id);
    ASSERT_TRUE(piece.ok()) << piece.status().ToString();
    a += *piece;
  }
  for (TokenId id : {9707, 1879}) b += *without.Push(id);
  a += *with.Finish();
  b += *without.Finish();
  EXPECT_EQ(a, "Hello world");
  EXPECT_EQ(a, b);
}

// Byte-fallback: an emoji is four <0x..> tokens in the llama2 tokenizer; the
// incremental decoder emits nothing until the character is complete.
TEST(IncrementalDecoder, HoldsBackPartialCharacters) {
  auto t = Load("tokenizers/llama2");
  auto e = t->Encode("ok 🤖!", false);
  ASSERT_TRUE(e.ok());
  IncrementalDecoder dec(t, true);
  std::vector<std::string> pieces;
  for (TokenId id : e->ids) {
    auto p = dec.Push(id);
    ASSERT_TRUE(p.ok());
    pieces.push_back(*p);
    EXPECT_EQ(FindInvalidUtf8(*p), std::string::npos);
  }
  std::string all;
  for (const auto& p : pieces) all += p;
  all += *dec.Finish();
  EXPECT_EQ(all, *t->Decode(e->ids, true));
  // The emoji's byte tokens yield empty pieces until its last byte arrives.
  size_t empty = 0;
  for (const auto& p : pieces) empty += p.empty();
  EXPECT_GE(empty, 3u);

  // Found by decode_fuzz: <0x05> decodes alone, but <0x05><0xE4> followed
  // by a normal token is an invalid group, which decodes as two U+FFFD.
  IncrementalDecoder group(t, false);
  std::string joined;
  for (TokenId id : {8, 231, 4611}) joined += *group.Push(id);
  joined += *group.Finish();
  EXPECT_EQ(joined, *t->Decode({8, 231, 4611}, false));

  // Found by decode_fuzz: with skip_special_tokens, <0x65> <unk> <0xFD>
  // decodes as one (invalid) byte group.
  IncrementalDecoder skipping(t, true);
  joined.clear();
  for (TokenId id : {0, 104, 0, 256}) joined += *skipping.Push(id);
  joined += *skipping.Finish();
  EXPECT_EQ(joined, *t->Decode({0, 104, 0, 256}, true));

  // Found by decode_fuzz: a long run of skipped specials must not leave the
  // decode window without an already-emitted token (Strip would then eat
  // the next token's space).
  std::vector<TokenId> run = {19263, 16959, 10815, 16959, 16896};
  run.insert(run.end(), 21, 0u);
  run.push_back(297);
  run.push_back(2849);
  IncrementalDecoder windowed(t, true);
  joined.clear();
  for (TokenId id : run) joined += *windowed.Push(id);
  joined += *windowed.Finish();
  EXPECT_EQ(joined, *t->Decode(run, true));

  // A byte sequence that never completes is flushed by Finish as U+FFFD.
  IncrementalDecoder broken(t, true);
  auto id = t->TokenToId("<0xF0>");
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(*broken.Push(*id), "");
  EXPECT_EQ(*broken.Finish(), "\xEF\xBF\xBD");
}

struct BadFile {
  const char* name;
  std::function<void(json&)> mutate;
  const char* expect;  // substring of the error
};

TEST(TokenizerLoad, MalformedFilesFailAtLoadNamingTheComponent) {
  std::ifstream in(Data("tokenizers/synthetic/bert/tokenizer.json"));
  const json base = json::parse(in);
  const std::vector<BadFile> cases = {
      {"model type", [](json& j) { j["model"]["type"] = "Nope"; }, "model: unsupported type 'Nope'"},
      {"no model", [](json& j) { j.erase("model"); }, "missing 'model'"},
      {"normalizer",
       [](json& j) {
         j["normalizer"] = {{"type", "Precompiled"}};
       },
       "normalizer: unsupported type 'Precompiled'"},
      {"pre_tokenizer regex",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(ab"}}}, {"behavior", "Isolated"}};
       },
       "invalid regular expression"},
      {"pre_tokenizer behavior",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
       },
       "pre_tokenizer Split: unknown 'behavior'"},
      {"unk missing", [](json& j) { j["model"]["unk_token"] = "<nope>"; },
       "unk_token '<nope>' is not in the vocabulary"},
      {"vocab id", [](json& j) { j["model"]["vocab"]["hello"] = -4; }, "out of range"},
      {"vocab type", [](json& j) { j["model"]["vocab"]["hello"] = "x"; }, "not an integer"},
      {"duplicate id", [](json& j) { j["model"]["vocab"]["zzz-new"] = 0; }, "used twice"},
      {"added token", [](json& j) { j["added_tokens"][0].erase("content"); }, "added_tokens"},
      {"template", [](json& j) { j["post_processor"]["single"][0]["SpecialToken"]["id"] = "[NOPE]"; },
       "not listed in special_tokens"},
      {"decoder",
       [](json& j) {
         j["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}};
       },
       "decoder Strip"},
      {"decoder type",
       [](json& j) {
         j["decoder"] = {{"type", "CTC"}};
       },
       "decoder: unsupported type 'CTC'"},
      {"post type", [](json& j) { j["post_processor"] = json::array(); }, "post_processor"},
      {"truncation",
       [](json& j) {
         j["truncation"] = {{"max_length", 8}, {"strategy", "Sideways"}};
       },
       "unknown strategy"},
  };
  for (const auto& c : cases) {
    json j = base;
    c.mutate(j);
    auto t = Tokenizer::FromJson(j.dump());
    ASSERT_FALSE(t.ok()) << c.name;
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos) << c.name << ": " << t.status().message();
  }
  EXPECT_NE(Tokenizer::FromJson("{not json").status().message().find("not valid JSON"), std::string::npos);
  EXPECT_NE(Tokenizer::FromJson("[1]").status().message().find("must be an object"), std::string::npos);
  EXPECT_EQ(Tokenizer::FromPath("/nonexistent/dir").status().code(), ErrorCode::kNotFound);
  // BPE merges that name unknown tokens.
  std::ifstream rin(Data("tokenizers/synthetic/roberta/tokenizer.json"));
  json r = json::parse(rin);
  r["model"]["merges"].push_back({"zz-unknown", "a"});
  EXPECT_NE(Tokenizer::FromJson(r.dump()).status().message().find("merge"), std::string::npos);
}

TEST(TokenizerTruncation, StrideAndWindowLimitsAreErrors) {
  auto t = Load("tokenizers/synthetic/bert");
  Truncation tr;
  tr.max_length = 16;
  tr.stride = 20;
  tr.strategy = TruncationStrategy::kOnlySecond;
  std::string ctx;
  for (int k = 0; k < 200; ++k) ctx += "hello world ";
  auto e = t->EncodePair("hi", ctx, true, tr);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("stride"), std::string::npos);
  tr.max_length = 3;  // leaves no room next to [CLS] [SEP] [SEP]
  tr.stride = 0;
  EXPECT_FALSE(t->EncodePair("hi", ctx, true, tr).ok());
  // A huge context with a stride of max_len-1 is refused, not allocated.
  std::string huge;
  for (int k = 0; k < 400'000; ++k) huge += "hello world ";
  tr.max_length = 384;
  tr.stride = 370;
  auto h = t->EncodePair("hi", huge, true, tr);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("overflowing"), std::string::npos) << h.status().message();
}

}  // namespace
}  // namespace ropeserve::tok
