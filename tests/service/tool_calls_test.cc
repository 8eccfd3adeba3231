// Tool calling: reading tools/tool_choice, the constraints of required and
// named choices (compiled and walked), parsing each family's call format,
// and the streaming holdback.
#include "server/service/tool_calls.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/structured/automaton.h"
#include "server/structured/constraint.h"

namespace ropeserve::service {
namespace {

using ojson = nlohmann::ordered_json;

const ojson kTools = ojson::parse(R"([
  {"type":"function","function":{"name":"get_weather","description":"d",
    "parameters":{"type":"object","properties":{"city":{"$ref":"#/$defs/City"}},"required":["city"],
                  "$defs":{"City":{"type":"string","maxLength":8}}}}},
  {"type":"function","function":{"name":"noop"}}])");

ToolRequest Read(const ojson& tools, const ojson& choice, const ojson& parallel = nullptr) {
  auto r = ReadToolRequest(&tools, &choice, &parallel);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : ToolRequest{};
}

TEST(ToolCalls, ReadsChoicesAndRefusesBadOnesNamingTheField) {
  EXPECT_EQ(Read(kTools, nullptr).choice, ToolChoice::kAuto);
  EXPECT_EQ(Read(kTools, "required").choice, ToolChoice::kRequired);
  EXPECT_EQ(Read(kTools, "none").choice, ToolChoice::kNone);
  const auto named = Read(kTools, ojson::parse(R"({"type":"function","function":{"name":"noop"}})"));
  EXPECT_EQ(named.choice, ToolChoice::kNamed);
  EXPECT_EQ(named.named, "noop");
  EXPECT_FALSE(Read(kTools, "auto", false).parallel);

  const std::pair<const char*, std::string> bad[] = {
      {R"({"tools":[{"type":"retrieval"}]})", "tools[0].type"},
      {R"({"tools":[{"type":"function","function":{"name":"bad name"}}]})", "tools[0].function.name"},
      {R"({"tools":[{"type":"function","function":{"name":"f","parameters":[]}}]})", "tools[0].function.parameters"},
      {R"({"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]})",
       "tools[1].function.name"},
      {R"({"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"})", "tool_choice"},
      {R"({"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})",
       "tool_choice"},
      {R"({"tool_choice":"required"})", "tool_choice"},
      {R"({"tools":{},"tool_choice":"auto"})", "tools"},
      {R"({"tools":[],"parallel_tool_calls":1})", "parallel_tool_calls"},
  };
  for (const auto& [body, param] : bad) {
    const ojson b = ojson::parse(body);
    const ojson* t = b.contains("tools") ? &b["tools"] : nullptr;
    const ojson* c = b.contains("tool_choice") ? &b["tool_choice"] : nullptr;
    const ojson* p = b.contains("parallel_tool_calls") ? &b["parallel_tool_calls"] : nullptr;
    auto r = ReadToolRequest(t, c, p);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().param(), param) << body << ": " << r.status().message();
  }
}

structured::Dfa Compile(const structured::Constraint& c) {
  auto e = structured::ConstraintExpr(c);
  EXPECT_TRUE(e.ok()) << e.status().message();
  auto d = structured::Dfa::Compile(*e);
  EXPECT_TRUE(d.ok()) << d.status().message();
  return std::move(*d);
}

TEST(ToolCalls, RequiredConstrainsToAnArrayOfKnownCallsWithTheirOwnDefs) {
  const auto r = Read(kTools, "required");
  const auto c = ToolConstraint(r);
  ASSERT_EQ(c.kind, structured::Constraint::Kind::kJsonSchema);
  EXPECT_EQ(c.param, "tools");
  const auto d = Compile(c);
  EXPECT_TRUE(d.Matches(R"([{"name":"get_weather","arguments":{"city":"Oslo"}}])"));
  EXPECT_TRUE(d.Matches(R"([{"name":"noop","arguments":{}},{"name":"get_weather","arguments":{"city":"x"}}])"));
  EXPECT_FALSE(d.Matches(R"([])"));
  EXPECT_FALSE(d.Matches(R"([{"name":"get_weather","arguments":{"city":"Amsterdam!"}}])"));  // maxLength 8 via $ref
  EXPECT_FALSE(d.Matches(R"([{"name":"other","arguments":{}}])"));
  // parallel_tool_calls: false allows one call.
  const auto single = Compile(ToolConstraint(Read(kTools, "required", false)));
  EXPECT_FALSE(single.Matches(R"([{"name":"noop","arguments":{}},{"name":"noop","arguments":{}}])"));

  auto out = ParseToolOutput(r, ToolFormat::kHermes, R"([{"name":"get_weather","arguments":{"city":"Oslo"}}])");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(out.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_FALSE(out.content);
  EXPECT_EQ(ToolFinishReason(r, out, "stop"), "tool_calls");
  EXPECT_EQ(ToolFinishReason(r, out, "length"), "length");
}

TEST(ToolCalls, NamedConstrainsToTheArguments) {
  const auto r = Read(kTools, ojson::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
  const auto d = Compile(ToolConstraint(r));
  EXPECT_TRUE(d.Matches(R"({"city":"Oslo"})"));
  EXPECT_FALSE(d.Matches(R"({})"));
  auto out = ParseToolOutput(r, ToolFormat::kHermes, R"({"city": "Oslo"})");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, R"({"city": "Oslo"})");  // as generated
  EXPECT_EQ(ToolFinishReason(r, out, "stop"), "stop");       // OpenAI: a forced call ends with "stop"
}

TEST(ToolCalls, ParsesHermesAndLlama3Formats) {
  const auto r = Read(kTools, "auto");
  auto h =
      ParseToolOutput(r, ToolFormat::kHermes,
                      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
                      "</tool_call>\n<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>");
  ASSERT_EQ(h.calls.size(), 2u);
  EXPECT_EQ(h.calls[1].name, "noop");
  EXPECT_EQ(h.content, std::optional<std::string>("Let me check."));
  EXPECT_NE(h.calls[0].id, h.calls[1].id);
  // A malformed block stays text.
  auto broken = ParseToolOutput(r, ToolFormat::kHermes, "<tool_call>{\"name\": </tool_call>");
  EXPECT_TRUE(broken.calls.empty());
  EXPECT_EQ(broken.content, std::optional<std::string>("<tool_call>{\"name\": </tool_call>"));
  // Without parallel calls only the first is kept.
  EXPECT_EQ(ParseToolOutput(Read(kTools, "auto", false), ToolFormat::kHermes,
                            "<tool_call>{\"name\":\"a\",\"arguments\":{}}</"
                            "tool_call><tool_call>{\"name\":\"b\",\"arguments\":{}}</tool_call>")
                .calls.size(),
            1u);
  auto l = ParseToolOutput(r, ToolFormat::kLlama3Json, R"({"name": "get_weather", "parameters": {"city": "Oslo"}})");
  ASSERT_EQ(l.calls.size(), 1u);
  EXPECT_EQ(l.calls[0].arguments, R"({"city": "Oslo"})");
  auto text = ParseToolOutput(r, ToolFormat::kLlama3Json, "It is sunny.");
  EXPECT_TRUE(text.calls.empty());
  EXPECT_EQ(text.content, std::optional<std::string>("It is sunny."));
}

// What the model generated reaches the client byte for byte: integers past
// 2^64 (a float after a parse and dump), long decimals, escapes, non-ASCII
// and spacing, in every choice and format.
TEST(ToolCalls, ArgumentsAreTheGeneratedBytes) {
  const std::vector<std::string> arguments = {
      R"({"a":577788755521755200000000000})",
      R"({"a": 18446744073709551617, "b": -0.1000000000000000055511151231257827, "c": 1E+300})",
      R"({"city":"Z\u00fcrich \"old\" \\ town\n","tags":["\ud83d\ude00","\/"]})",
      "{\"city\": \"Z\xc3\xbcrich\", \"nested\": {\"deep\": [1.50, 2e0, {}]}}",
      R"({ })",
      // Valid JSON past a double's range, which a JSON library refuses.
      "{\"a\": " + std::string(400, '9') + "}",
  };
  for (const auto& args : arguments) {
    SCOPED_TRACE(args);
    const auto required = ParseToolOutput(
        Read(kTools, "required"), ToolFormat::kHermes,
        "[{\"name\":\"noop\",\"arguments\":" + args + "}, {\"name\": \"noop\", \"arguments\": " + args + "}]");
    ASSERT_EQ(required.calls.size(), 2u);
    EXPECT_EQ(required.calls[0].arguments, args);
    EXPECT_EQ(required.calls[1].arguments, args);
    const auto named = ParseToolOutput(Read(kTools, ojson::parse(R"({"type":"function","function":{"name":"noop"}})")),
                                       ToolFormat::kHermes, args);
    ASSERT_EQ(named.calls.size(), 1u);
    EXPECT_EQ(named.calls[0].arguments, args);
    const auto hermes = ParseToolOutput(Read(kTools, "auto"), ToolFormat::kHermes,
                                        "<tool_call>\n{\"name\": \"noop\", \"arguments\": " + args + "}\n</tool_call>");
    ASSERT_EQ(hermes.calls.size(), 1u);
    EXPECT_EQ(hermes.calls[0].arguments, args);
    const auto llama = ParseToolOutput(Read(kTools, "auto"), ToolFormat::kLlama3Json,
                                       "{\"name\": \"noop\", \"parameters\": " + args + "}");
    ASSERT_EQ(llama.calls.size(), 1u);
    EXPECT_EQ(llama.calls[0].arguments, args);
  }
  // Arguments the model wrote as a JSON string: the string's content.
  const auto in_string =
      ParseToolOutput(Read(kTools, "auto"), ToolFormat::kHermes,
                      R"(<tool_call>{"name":"noop","arguments":"{\"a\": 123456789012345678901234567}"}</tool_call>)");
  ASSERT_EQ(in_string.calls.size(), 1u);
  EXPECT_EQ(in_string.calls[0].arguments, R"({"a": 123456789012345678901234567})");
  // A key given twice: the last one, as the parsed value keeps it.
  const auto twice = ParseToolOutput(Read(kTools, "required"), ToolFormat::kHermes,
                                     R"([{"name":"noop","arguments":{"a":1},"arguments":{"b":2.50}}])");
  ASSERT_EQ(twice.calls.size(), 1u);
  EXPECT_EQ(twice.calls[0].arguments, R"({"b":2.50})");
}

TEST(ToolCalls, FormatFollowsTheTemplate) {
  EXPECT_EQ(ToolFormatForTemplate("{{ '<tool_call>' }}"), ToolFormat::kHermes);
  EXPECT_EQ(ToolFormatForTemplate("<|python_tag|>"), ToolFormat::kLlama3Json);
  EXPECT_EQ(ToolFormatForTemplate("plain"), ToolFormat::kHermes);
}

// Streaming in auto mode: text before a call streams, the tag's possible
// prefix is held, the call comes from Finish; any split of the output
// gives the same content and calls.
TEST(ToolCalls, StreamerHoldsBackACallAtAnySplit) {
  const auto r = Read(kTools, "auto");
  const std::string text = "Sure <b>. <tool_call>{\"name\":\"noop\",\"arguments\":{}}</tool_call>";
  for (std::size_t a = 0; a <= text.size(); ++a) {
    for (std::size_t b = a; b <= text.size(); b += 7) {
      ToolCallStreamer s(r, ToolFormat::kHermes);
      std::string sent = s.Push(text.substr(0, a));
      sent += s.Push(text.substr(a, b - a));
      sent += s.Push(text.substr(b));
      const ToolOutput out = s.Finish();
      sent += out.content.value_or("");
      EXPECT_EQ(sent, "Sure <b>. ") << a << "," << b;
      ASSERT_EQ(out.calls.size(), 1u) << a << "," << b;
      EXPECT_EQ(out.calls[0].name, "noop");
    }
  }
  // No call: everything is content, the held-back tail included.
  ToolCallStreamer s(r, ToolFormat::kHermes);
  std::string sent = s.Push("a <tool");
  EXPECT_EQ(sent, "a ");
  EXPECT_EQ(s.Finish().content, std::optional<std::string>("<tool"));
  // Llama 3: decided by the first non-space character.
  ToolCallStreamer prose(r, ToolFormat::kLlama3Json);
  EXPECT_EQ(prose.Push("  "), "");
  EXPECT_EQ(prose.Push("Sunny"), "  Sunny");
  EXPECT_EQ(prose.Push(" {today}"), " {today}");
  EXPECT_TRUE(prose.Finish().calls.empty());
  ToolCallStreamer call(r, ToolFormat::kLlama3Json);
  EXPECT_EQ(call.Push(" {\"name\": \"noop\", "), "");
  EXPECT_EQ(call.Push("\"parameters\": {}}"), "");
  EXPECT_EQ(call.Finish().calls.size(), 1u);
  // Required: nothing streams, the calls come at the end.
  ToolCallStreamer req(Read(kTools, "required"), ToolFormat::kHermes);
  EXPECT_EQ(req.Push(R"([{"name":"noop","arguments":{}}])"), "");
  EXPECT_EQ(req.Finish().calls.size(), 1u);
}

}  // namespace
}  // namespace ropeserve::service
