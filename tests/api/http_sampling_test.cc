// Black-box tests of the REST API's sampling and streaming options on a
// tiny generated model: penalties, n choices, stop strings across tokens,
// streamed text equal to unary text.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <vector>

#include "tests/api/http_fixture.h"
#include "tests/common/offline.h"

namespace ropeserve {
namespace {

using json = nlohmann::json;

TEST_F(HttpApi, PenaltiesAreAppliedAndValidated) {
  const std::string base = R"("prompt":[5,6,7],"max_tokens":12,"temperature":0,"ignore_eos":true)";
  auto [c0, plain] = Post("{" + base + "}");
  auto [c1, pen] = Post("{" + base + R"(,"frequency_penalty":-2,"presence_penalty":-2,"repetition_penalty":1.5})");
  auto [c2, again] = Post("{" + base + R"(,"frequency_penalty":-2,"presence_penalty":-2,"repetition_penalty":1.5})");
  ASSERT_EQ(c0, 200);
  ASSERT_EQ(c1, 200) << pen.dump();
  EXPECT_EQ(pen["choices"][0]["token_ids"], again["choices"][0]["token_ids"]);  // deterministic
  // Same semantics as the offline path.
  service::GenerationFields o;
  o.max_tokens = 12;
  o.ignore_eos = true;
  o.frequency_penalty = -2;
  o.presence_penalty = -2;
  o.repetition_penalty = 1.5;
  auto want = testing::OfflineGenerate(*model_, {5, 6, 7}, o);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(pen["choices"][0]["token_ids"], want->generated_ids);
  // A huge repetition penalty: no token of the prompt or of the output
  // comes back.
  auto [c3, strong] = Post(
      R"({"prompt":[227,179,58,214,21,171],"max_tokens":24,"temperature":0,"ignore_eos":true,"repetition_penalty":1000})");
  ASSERT_EQ(c3, 200);
  std::set<std::int64_t> seen = {227, 179, 58, 214, 21, 171};
  for (const auto& id : strong["choices"][0]["token_ids"])
    EXPECT_TRUE(seen.insert(id.get<std::int64_t>()).second) << id;
  EXPECT_EQ(Post("{" + base + R"(,"presence_penalty":3})").first, 400);
  EXPECT_EQ(Post("{" + base + R"(,"repetition_penalty":0})").first, 400);
  EXPECT_EQ(Post("{" + base + R"(,"min_tokens":13})").first, 400);
  EXPECT_EQ(Post("{" + base + R"(,"stop_token_ids":[-1]})").first, 400);
}

}  // namespace
}  // namespace ropeserve

namespace ropeserve {
namespace {

TEST_F(HttpApi, NChoicesShareThePromptAndFollowSeeds) {
  // 40 prompt tokens: two full blocks of 16 can come from the prefix cache.
  std::vector<int> prompt;
  for (int k = 0; k < 40; ++k) prompt.push_back(3 + (k * 7) % 200);
  const json base = {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 1.0}, {"ignore_eos", true}, {"seed", 11}};
  const auto hits_before = service_->engine().stats().prefix_hits.load();  // blocks
  json req = base;
  req["n"] = 3;
  auto [code, body] = Post(req.dump());
  ASSERT_EQ(code, 200) << body.dump();
  ASSERT_EQ(body["choices"].size(), 3u);
  EXPECT_EQ(body["usage"]["completion_tokens"], 18);
  EXPECT_GE(service_->engine().stats().prefix_hits.load() - hits_before, 4u);  // 2 choices x 2 full blocks
  for (int i = 0; i < 3; ++i) {
    // Choice i is what a single request with seed + i gives.
    json one = base;
    one["seed"] = 11 + i;
    auto [c1, single] = Post(one.dump());
    ASSERT_EQ(c1, 200);
    EXPECT_EQ(body["choices"][i]["index"], i);
    EXPECT_EQ(body["choices"][i]["token_ids"], single["choices"][0]["token_ids"]) << i;
  }
  EXPECT_NE(body["choices"][0]["token_ids"], body["choices"][1]["token_ids"]);
  EXPECT_EQ(Post(R"({"prompt":[1],"n":0})").first, 400);
  EXPECT_EQ(Post(R"({"prompt":[1],"n":17})").first, 400);
  auto [c2, chat] = Post(R"({"messages":[{"role":"user","content":"hi"}],"n":2,"max_tokens":3,"temperature":0})",
                         "/v1/chat/completions");
  ASSERT_EQ(c2, 200);
  ASSERT_EQ(chat["choices"].size(), 2u);
  EXPECT_EQ(chat["choices"][0]["message"], chat["choices"][1]["message"]);  // greedy choices agree
}

}  // namespace
}  // namespace ropeserve

namespace ropeserve {
namespace {

// A stop string made of the end of one token's text and the start of the
// next one's: found across the token boundary, text cut before it.
TEST_F(HttpApi, StopStringSpanningTwoTokens) {
  const std::string base = R"("prompt":"Once upon a time","max_tokens":16,"temperature":0,"ignore_eos":true)";
  auto [code, full] = Post("{" + base + "}");
  ASSERT_EQ(code, 200);
  const auto ids = full["choices"][0]["token_ids"].get<std::vector<TokenId>>();
  const std::string text = full["choices"][0]["text"];
  // Find a boundary between two tokens that both decode to plain ASCII.
  for (size_t i = 1; i + 1 < ids.size(); ++i) {
    const std::string before = *tokenizer_->Decode(std::vector<TokenId>(ids.begin(), ids.begin() + i), true);
    const std::string after = *tokenizer_->Decode(std::vector<TokenId>(ids.begin(), ids.begin() + i + 1), true);
    if (before.empty() || after.size() <= before.size() + 1 || text.compare(0, after.size(), after) != 0) continue;
    if (static_cast<unsigned char>(before.back()) >= 0x80 || static_cast<unsigned char>(after[before.size()]) >= 0x80)
      continue;
    const std::string stop = before.substr(before.size() - 1) + after.substr(before.size(), 1);
    const size_t cut = text.find(stop);
    ASSERT_NE(cut, std::string::npos);
    auto [c2, stopped] = Post("{" + base + ",\"stop\":" + json(stop).dump() + "}");
    ASSERT_EQ(c2, 200);
    EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(stopped["choices"][0]["text"], text.substr(0, cut)) << "stop " << json(stop).dump();
    return;
  }
  GTEST_SKIP() << "no ASCII token boundary in this output";
}

}  // namespace
}  // namespace ropeserve

namespace ropeserve {
namespace {

// Streamed text equals the unary text, with and without stop strings (the
// stream holds back text that might begin a stop string).
TEST_F(HttpApi, StreamedTextEqualsUnaryTextWithStopStrings) {
  const std::string base = R"("prompt":"Once upon a time","max_tokens":24,"temperature":0,"ignore_eos":true)";
  auto [code, full] = Post("{" + base + "}");
  ASSERT_EQ(code, 200);
  const std::string text = full["choices"][0]["text"];
  ASSERT_GE(text.size(), 8u);
  // An ASCII piece of the output at or after `from` (stop strings must be
  // valid UTF-8; the random model's text is not all ASCII).
  auto ascii_piece = [&](size_t from, size_t len) {
    for (size_t i = from; i + len <= text.size(); ++i) {
      bool ok = true;
      for (size_t k = 0; k < len; ++k) ok = ok && static_cast<unsigned char>(text[i + k]) < 0x80;
      if (ok) return text.substr(i, len);
    }
    return std::string("zz-none");
  };
  int stopped = 0;
  // Also: a stop string whose prefix occurs but which never completes (held
  // back, then released), and two overlapping stop strings.
  const std::string p6 = ascii_piece(text.size() / 3, 6);
  for (const std::string& stops :
       {std::string("[]"), json::array({ascii_piece(text.size() / 2, 3)}).dump(),
        json::array({"zz-never", ascii_piece(1, 2)}).dump(), json::array({ascii_piece(2, 4) + "\u0001"}).dump(),
        json::array({p6, p6.substr(2, 3)}).dump()}) {
    const std::string body = "{" + base + ",\"stop\":" + stops;
    auto [c1, unary] = Post(body + "}");
    ASSERT_EQ(c1, 200);
    auto events = StreamEvents(server_->port(), "/v1/completions", body + ",\"stream\":true}");
    ASSERT_GE(events.size(), 2u) << stops;
    EXPECT_EQ(events.back(), "[DONE]");
    std::string streamed, finish;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      json e = json::parse(events[i]);
      streamed += e["choices"][0]["text"].get<std::string>();
      if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(json(streamed), unary["choices"][0]["text"]) << stops;
    const std::string got = unary["choices"][0]["text"];
    EXPECT_EQ(text.compare(0, got.size(), got), 0) << "not a prefix of the full output: " << stops;
    for (const auto& st : json::parse(stops)) EXPECT_EQ(got.find(st.get<std::string>()), std::string::npos) << stops;
    EXPECT_EQ(json(finish), unary["choices"][0]["finish_reason"]) << stops;
    stopped += finish == "stop";
  }
  EXPECT_GE(stopped, 1) << "no case exercised a stop string: " << text;
  // Summaries too.
  auto [c2, summary] = Post(R"({"text":"A long day at the office.","max_tokens":12})", "/v1/summarize");
  ASSERT_EQ(c2, 200) << summary.dump();
  auto events = StreamEvents(server_->port(), "/v1/summarize",
                             R"({"text":"A long day at the office.","max_tokens":12,"stream":true})");
  std::string streamed;
  for (size_t i = 0; i + 1 < events.size(); ++i) streamed += json::parse(events[i]).value("delta", "");
  EXPECT_EQ(json(streamed), summary["summary"]);
  EXPECT_EQ(service_->engine().pool().num_free(), service_->kv_cache().num_blocks);
}

}  // namespace
}  // namespace ropeserve
