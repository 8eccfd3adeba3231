// Tool calls through the REST API on a tiny generated model: what the model
// generated reaches the client byte for byte, unary and streamed.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/api/http_fixture.h"

namespace ropeserve {
namespace {

using json = nlohmann::json;

// The longest run of digits in `s`.
std::size_t LongestDigitRun(const std::string& s) {
  std::size_t best = 0, run = 0;
  for (char c : s) {
    run = (c >= '0' && c <= '9') ? run + 1 : 0;
    best = std::max(best, run);
  }
  return best;
}

// tool_choice "required" constrains the output to a JSON array of calls; the
// arguments must be a piece of the generated text (decoded from the returned
// token ids), never parsed and dumped again: a random model writes integers
// and exponents of any length, which a parse and dump would turn into
// floats, and which overflow a double (a JSON library then refuses the
// whole, valid, output and the calls came back as text).
TEST_F(HttpApi, ToolCallArgumentsAreTheGeneratedText) {
  const json tools = json::parse(R"([{"type":"function","function":{"name":"add","parameters":{"type":"object",
      "properties":{"a":{"type":"integer"},"b":{"type":"number"},"s":{"type":"string"}},"required":["a","b","s"]}}}])");
  int calls = 0;
  std::size_t longest_number = 0;
  for (int seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    json req = {{"messages", json::array({{{"role", "user"}, {"content", "Add these."}}})},
                {"tools", tools},
                {"tool_choice", "required"},
                {"max_tokens", 160},
                {"temperature", 1.0},
                {"seed", seed}};
    auto [code, body] = Post(req.dump(), "/v1/chat/completions");
    ASSERT_EQ(code, 200) << body.dump();
    const json& choice = body["choices"][0];
    const std::string text = *tokenizer_->Decode(choice["token_ids"].get<std::vector<TokenId>>(), true);
    if (choice["finish_reason"] != "tool_calls") {
      // Cut short: the text comes back as it is.
      EXPECT_EQ(choice["message"]["content"], text);
      continue;
    }
    ASSERT_TRUE(choice["message"]["tool_calls"].is_array()) << body.dump();
    std::map<int, std::string> unary;
    for (const auto& call : choice["message"]["tool_calls"]) {
      const std::string args = call["function"]["arguments"];
      EXPECT_NE(text.find(args), std::string::npos) << args << "\nis not in the generated text\n" << text;
      EXPECT_TRUE(args.size() >= 2 && args.front() == '{' && args.back() == '}') << args;
      longest_number = std::max(longest_number, LongestDigitRun(args));
      unary[static_cast<int>(unary.size())] = args;
      ++calls;
    }
    // Streamed: delta.tool_calls pieces, by index, add up to the same.
    req["stream"] = true;
    req.erase("return_token_ids");
    const auto events = StreamEvents(server_->port(), "/v1/chat/completions", req.dump());
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::map<int, std::string> streamed;
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
      const json e = json::parse(events[i]);
      if (e["choices"].empty()) continue;
      const json& delta = e["choices"][0]["delta"];
      if (!delta.contains("tool_calls")) continue;
      for (const auto& c : delta["tool_calls"])
        if (c.contains("function") && c["function"].contains("arguments"))
          streamed[c["index"].get<int>()] += c["function"]["arguments"].get<std::string>();
    }
    EXPECT_EQ(streamed, unary);
  }
  EXPECT_GE(calls, 4) << "too few seeds finished their calls";
  // The random model writes long integers (of 80-110 digits for these
  // seeds), beyond any parser's int64 or double: they arrived unchanged.
  EXPECT_GE(longest_number, 27u);
}

}  // namespace
}  // namespace ropeserve
