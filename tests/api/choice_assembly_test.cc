// Streaming and unary answers of the same request cannot disagree: the
// chunks of a stream, folded (texts and token ids joined, logprobs
// appended, the one finish reason), equal the unary choice field for field
// (server/api/rest/choice_assembler.h builds both). Seeded sampling with n
// choices per prompt, echo, logprobs with alternatives, vLLM's
// prompt_logprobs and token ids, for completions and chat.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/api/http_fixture.h"

namespace ropeserve {
namespace {

using json = nlohmann::json;

// Appends each array of `part` to the one of the same key in `into`.
void AppendArrays(json& into, const json& part) {
  for (const auto& [key, value] : part.items()) {
    if (!into.contains(key)) into[key] = json::array();
    for (const auto& v : value) into[key].push_back(v);
  }
}

// The choices of a stream's chunks folded by index. Fields that a stream
// sends once (the echo's prompt ids, prompt_logprobs, the role) must come
// once, in the choice's first chunk; finish_reason is null until the last.
std::map<int, json> FoldChoices(const std::vector<std::string>& events, const char* text_field, json* usage) {
  std::map<int, json> folded;
  for (const std::string& e : events) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    if (chunk.contains("usage")) *usage = chunk["usage"];
    for (const json& c : chunk["choices"]) {
      const int i = c["index"].get<int>();
      const bool first = !folded.contains(i);
      json& f = folded[i];
      if (first) f = {{"index", i}, {"finish_reason", nullptr}, {"logprobs", nullptr}};
      EXPECT_TRUE(f["finish_reason"].is_null()) << "a chunk after choice " << i << "'s finish reason: " << e;
      for (const auto& [key, value] : c.items()) {
        if (key == "index") continue;
        if (key == "finish_reason") {
          f[key] = value;
        } else if (key == "prompt_token_ids" || key == "prompt_logprobs") {
          EXPECT_TRUE(first) << key << " of choice " << i << " after its first chunk";
          f[key] = value;
        } else if (key == text_field) {
          f[key] = f.value(key, std::string()) + value.get<std::string>();
        } else if (key == "delta") {
          if (!f.contains("message")) f["message"] = json::object();
          json& message = f["message"];
          for (const auto& [part, text] : value.items()) {
            if (part == "role") {
              EXPECT_TRUE(first) << "role after choice " << i << "'s first chunk";
              message[part] = text;
            } else {
              message[part] = message.value(part, std::string()) + text.get<std::string>();
            }
          }
        } else if (key == "token_ids") {
          AppendArrays(f, json{{"token_ids", value}});
        } else if (key == "logprobs") {
          if (value.is_null()) continue;
          if (f["logprobs"].is_null()) f["logprobs"] = json::object();
          AppendArrays(f["logprobs"], value);
        } else {
          ADD_FAILURE() << "unexpected field " << key << " in " << e;
        }
      }
    }
  }
  return folded;
}

TEST_F(HttpApi, StreamedCompletionChoicesFoldToTheUnaryOnes) {
  // Two prompts x two seeded choices: choice k belongs to prompt k / 2, and
  // its echo and prompt logprobs come from the prompt's first choice.
  json body = {{"prompt", json::array({json::array({5, 9, 14, 3, 7, 21, 8}), json::array({11, 2, 40})})},
               {"n", 2},
               {"max_tokens", 7},
               {"temperature", 0.9},
               {"seed", 7},
               {"ignore_eos", true},
               {"echo", true},
               {"logprobs", 2},
               {"prompt_logprobs", 1},
               {"return_token_ids", true}};
  auto [code, unary] = PostRaw(body.dump());
  ASSERT_EQ(code, 200) << unary.dump();
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  json usage;
  const std::map<int, json> folded =
      FoldChoices(StreamEvents(server_->port(), "/v1/completions", body.dump()), "text", &usage);
  ASSERT_EQ(folded.size(), 4u);
  ASSERT_EQ(unary["choices"].size(), 4u);
  for (const json& want : unary["choices"]) {
    const int i = want["index"].get<int>();
    ASSERT_TRUE(folded.contains(i)) << i;
    // The echoed prompt's logprobs are real for every choice (not only the
    // prompt's first, which computed them).
    EXPECT_TRUE(want["logprobs"]["token_logprobs"][1].is_number()) << want.dump();
    EXPECT_EQ(folded.at(i), want) << "choice " << i;
  }
  EXPECT_EQ(usage["prompt_tokens"], unary["usage"]["prompt_tokens"]);
  EXPECT_EQ(usage["completion_tokens"], unary["usage"]["completion_tokens"]);
}

TEST_F(HttpApi, StreamedChatChoicesFoldToTheUnaryOnes) {
  json body = {{"messages", json::array({{{"role", "user"}, {"content", "Sum up: a b c"}}})},
               {"n", 3},
               {"max_tokens", 6},
               {"temperature", 0.9},
               {"seed", 3},
               {"ignore_eos", true},
               {"logprobs", true},
               {"top_logprobs", 2},
               {"return_token_ids", true}};
  auto [code, unary] = PostRaw(body.dump(), "/v1/chat/completions");
  ASSERT_EQ(code, 200) << unary.dump();
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  json usage;
  const std::map<int, json> folded =
      FoldChoices(StreamEvents(server_->port(), "/v1/chat/completions", body.dump()), "content", &usage);
  ASSERT_EQ(folded.size(), 3u);
  ASSERT_EQ(unary["choices"].size(), 3u);
  for (const json& want : unary["choices"]) {
    const int i = want["index"].get<int>();
    ASSERT_TRUE(folded.contains(i)) << i;
    EXPECT_EQ(folded.at(i), want) << "choice " << i;
  }
  EXPECT_EQ(usage["prompt_tokens"], unary["usage"]["prompt_tokens"]);
  EXPECT_EQ(usage["completion_tokens"], unary["usage"]["completion_tokens"]);
}

}  // namespace
}  // namespace ropeserve
