// One chat output processor for streaming and unary: for every way of
// cutting an output into streamed pieces, the pieces add up to the unary
// message (reasoning, content, tool calls, finish reason).
#include "server/service/chat_output.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace ropeserve::service {
namespace {

using ojson = nlohmann::ordered_json;

ToolRequest Tools(const char* choice) {
  const ojson tools = ojson::parse(R"([{"type":"function","function":{"name":"get_weather"}},
                                       {"type":"function","function":{"name":"noop"}}])");
  const ojson c = ojson::parse(choice);
  auto r = ReadToolRequest(&tools, &c, nullptr);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : ToolRequest{};
}

// The streamed pieces of `text` cut at `cuts`, added up.
struct Streamed {
  std::string reasoning, content, finish_reason;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};
Streamed Stream(const ChatOutputOptions& o, const std::string& prompt, const std::string& text,
                const std::vector<std::size_t>& cuts, const std::string& engine_reason) {
  ChatOutputProcessor p(o, prompt);
  Streamed s;
  std::size_t from = 0;
  std::vector<std::size_t> ends = cuts;
  ends.push_back(text.size());
  for (std::size_t k = 0; k < ends.size(); ++k) {
    const bool last = k + 1 == ends.size();
    auto d = p.Push(std::string_view(text).substr(from, ends[k] - from), last, last ? engine_reason : "");
    from = ends[k];
    s.reasoning += d.reasoning;
    s.content += d.content;
    for (const auto& c : d.calls) s.calls.emplace_back(c.name, c.arguments);
    if (last)
      s.finish_reason = d.finish_reason;
    else
      EXPECT_TRUE(d.calls.empty() && d.finish_reason.empty());
  }
  return s;
}

void ExpectStreamedEqualsWhole(const ChatOutputOptions& o, const std::string& prompt, const std::string& text) {
  const ChatMessage whole = ChatOutputProcessor::Whole(o, prompt, text, "stop");
  std::vector<std::pair<std::string, std::string>> calls;
  for (const auto& c : whole.calls) calls.emplace_back(c.name, c.arguments);
  std::vector<std::vector<std::size_t>> cut_sets = {{}};
  for (std::size_t i = 0; i <= text.size(); ++i) cut_sets.push_back({i});
  std::vector<std::size_t> every;
  for (std::size_t i = 1; i < text.size(); ++i) every.push_back(i);
  cut_sets.push_back(every);  // one byte at a time
  for (const auto& cuts : cut_sets) {
    const Streamed s = Stream(o, prompt, text, cuts, "stop");
    const std::string where = text + " cut at " + (cuts.empty() ? "nothing" : std::to_string(cuts[0]));
    EXPECT_EQ(s.content, whole.content.value_or("")) << where;
    EXPECT_EQ(s.reasoning, whole.reasoning.value_or("")) << where;
    EXPECT_EQ(s.calls, calls) << where;
    EXPECT_EQ(s.finish_reason, whole.finish_reason) << where;
  }
}

TEST(ChatOutput, StreamedPiecesAddUpToTheUnaryMessage) {
  ChatOutputOptions plain;
  ChatOutputOptions reasoning;
  reasoning.reasons = true;
  ChatOutputOptions hidden = reasoning;
  hidden.include_reasoning = false;
  ChatOutputOptions hermes;
  hermes.tools = Tools(R"("auto")");
  ChatOutputOptions llama = hermes;
  llama.tool_format = ToolFormat::kLlama3Json;
  ChatOutputOptions required;
  required.tools = Tools(R"("required")");
  ChatOutputOptions both = hermes;
  both.reasons = true;
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"n\": "
      "123456789012345678901234567}}\n</tool_call>";
  for (const auto& [o, text] : std::vector<std::pair<ChatOutputOptions, std::string>>{
           {plain, "Hello <think>not reasoning</think> world"},
           {reasoning, "<think>Let me think.</think>\n\nThe answer."},
           {reasoning, "<thinkers> are content"},
           {reasoning, "<think>cut short"},
           {hidden, "<think>private</think>public"},
           {hermes, "Let me check.\n" + call + "\n" + call},
           {hermes, "No calls at all, <tool_ but no tag."},
           {hermes, "<tool_call>{\"name\": broken</tool_call> after"},
           {llama, "{\"name\": \"noop\", \"parameters\": {\"x\": 1.50}}"},
           {llama, "Plain text."},
           {required, R"([{"name":"noop","arguments":{"a":  1}},{"name":"get_weather","arguments":{}}])"},
           {required, R"([{"name":"noop","arguments":{"a":)"},
           {both, "<think>Which tool?</think>" + call},
       }) {
    ExpectStreamedEqualsWhole(o, "<|im_start|>assistant\n", text);
  }
  // A template that opens <think> itself: the output starts as reasoning.
  ExpectStreamedEqualsWhole(reasoning, "<|im_start|>assistant\n<think>\n", "still thinking</think>done");
}

TEST(ChatOutput, UnaryMessageFields) {
  ChatOutputOptions reasoning;
  reasoning.reasons = true;
  auto m = ChatOutputProcessor::Whole(reasoning, "", "<think>why</think>", "stop");
  EXPECT_FALSE(m.content);  // null, as vLLM
  EXPECT_EQ(m.reasoning, std::optional<std::string>("why"));
  m = ChatOutputProcessor::Whole(ChatOutputOptions{}, "", "", "length");
  EXPECT_EQ(m.content, std::optional<std::string>(""));  // plain chat: always a string
  EXPECT_EQ(m.finish_reason, "length");
  ChatOutputOptions hermes;
  hermes.tools = Tools(R"("auto")");
  m = ChatOutputProcessor::Whole(hermes, "",
                                 "Let me check.\n<tool_call>{\"name\":\"noop\",\"arguments\":{}}</tool_call>", "stop");
  EXPECT_EQ(m.content, std::optional<std::string>("Let me check.\n"));  // the text before the call, as generated
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(m.calls[0].arguments, "{}");
  EXPECT_EQ(m.finish_reason, "tool_calls");
  m = ChatOutputProcessor::Whole(hermes, "", "<tool_call>{\"name\":\"noop\",\"arguments\":{}}</tool_call>", "stop");
  EXPECT_FALSE(m.content);  // only calls
  // Cut by max_tokens: calls still parsed are returned, the reason stays.
  m = ChatOutputProcessor::Whole(hermes, "", "<tool_call>{\"name\":\"noop\",\"arguments\":{}}</tool_call>", "length");
  EXPECT_EQ(m.finish_reason, "length");
}

}  // namespace
}  // namespace ropeserve::service
