// Chat requests as real templates render them (tests/data/README.md says
// where each comes from): tool-call history read by the REST reader
// (Qwen2.5), and the reasoning split of Qwen3's <think> blocks.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "server/api/rest/rest_request.h"
#include "server/service/reasoning.h"
#include "server/template/chat_template.h"
#include "tests/checkpoint/test_checkpoints.h"

namespace ropeserve {
namespace {

std::string Qwen3Template() {
  return testing::ReadJson(testing::TestData("tokenizers/qwen3/tokenizer_config.json"))["chat_template"];
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Qwen2.5's template writes `tool_call.arguments | tojson`: the JSON string
// OpenAI clients send would come out encoded twice unless it is parsed.
TEST(ChatHistory, ToolCallArgumentsRenderAsJsonOnceWithQwen25) {
  auto t = ChatTemplate::FromSource(ReadText(testing::TestData("chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja")));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // What the openai SDK sends back after a tool call: arguments as a JSON
  // string, null content, then the tool's result.
  auto body = api::ReadChatBody(R"({"messages":[{"role":"user","content":"Weather in Paris?"},)"
                                R"({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",)"
                                R"("function":{"name":"weather","arguments":"{\"city\": \"Paris\"}"}}]},)"
                                R"({"role":"tool","tool_call_id":"c1","content":"18 C"}]})");
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  ChatTemplateOptions o;
  o.add_generation_prompt = true;
  auto text = t->Render(body->messages, o);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  // The arguments appear as a JSON object, not as a string encoded twice.
  EXPECT_NE(text->find(R"("arguments": {"city": "Paris"})"), std::string::npos) << *text;
  EXPECT_EQ(text->find(R"(\"city\")"), std::string::npos) << *text;
  EXPECT_NE(text->find("<tool_response>\n18 C\n</tool_response>"), std::string::npos) << *text;
}

TEST(ChatHistory, Qwen3ThinkingIsSplitAndEnableThinkingFalseClosesIt) {
  const std::string source = Qwen3Template();
  ASSERT_TRUE(service::ReasoningSplitter::ForTemplate(source));
  auto t = ChatTemplate::FromSource(source);
  ASSERT_TRUE(t.ok());
  auto body = api::ReadChatBody(R"({"messages":[{"role":"user","content":"2+2?"}]})");
  ASSERT_TRUE(body.ok());
  ChatTemplateOptions o;
  o.add_generation_prompt = true;
  auto thinking = t->Render(body->messages, o);
  ASSERT_TRUE(thinking.ok());
  // Thinking on: the model opens the block itself.
  auto split = service::ReasoningSplitter(*thinking).All("<think>\nadd them\n</think>\n\n4");
  EXPECT_EQ(split.reasoning, "\nadd them\n");
  EXPECT_EQ(split.content, "\n\n4");
  // enable_thinking: false: the template writes an empty block; all is content.
  o.extra["enable_thinking"] = false;
  auto off = t->Render(body->messages, o);
  ASSERT_TRUE(off.ok());
  EXPECT_NE(off->find("<think>\n\n</think>"), std::string::npos);
  split = service::ReasoningSplitter(*off).All("4");
  EXPECT_EQ(split.reasoning, "");
  EXPECT_EQ(split.content, "4");
}

}  // namespace
}  // namespace ropeserve
