// Reading REST bodies (server/api/rest_request.h): strict about unknown
// fields and unsupported values, 400 naming the field, never an exception.
#include "server/api/rest_request.h"

#include <gtest/gtest.h>

namespace ropeserve::api {
namespace {

// (HTTP-style verdict: "" when accepted, else the error's param).
template <typename Read>
std::string Refused(Read read, const std::string& body) {
  auto r = read(body);
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), ErrorCode::kMalformedRequest) << body << ": " << r.status().ToString();
  return r.status().param().empty() ? "(none)" : r.status().param();
}

TEST(RestRequest, UnknownFieldsAreRefusedByName) {
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","temprature":0.5})"), "temprature");
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[{"role":"user","content":"x"}],"foo":1})"), "foo");
  EXPECT_EQ(Refused(ReadSummarizeBody, R"({"text":"x","n":2})"), "n");  // summaries have one choice
  EXPECT_EQ(Refused(ReadQaBody, R"({"question":"q","context":"c","stream":true})"), "stream");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","stream_options":{"include_usage":true,"x":1}})"),
            "stream_options");
}

TEST(RestRequest, UnsupportedOpenAiFieldsAreRefusedOnlyWhenTheyAskForSomething) {
  // Asking for behaviour ropeserve does not implement: 400 naming the field.
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","echo":true})"), "echo");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","logit_bias":{"5":10}})"), "logit_bias");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","best_of":2})"), "best_of");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","suffix":"end"})"), "suffix");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","prompt_logprobs":1})"), "prompt_logprobs");
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)";
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("response_format":{"type":"json_object"}})"), "response_format");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("tools":[{"type":"function","function":{"name":"f"}}]})"), "tools");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("tool_choice":"required"})"), "tool_choice");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("guided_json":{}})"), "guided_json");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("modalities":["text","audio"]})"), "modalities");
  // The same fields with values that ask for nothing are accepted.
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","echo":false,"logit_bias":{},"best_of":1,"suffix":null,)"
                                        R"("user":"u1"})"),
            "");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("response_format":{"type":"text"},"tools":[],"tool_choice":"none",)"
                                         R"("store":false,"metadata":{"k":"v"},"modalities":["text"]})"),
            "");
}

TEST(RestRequest, MalformedChatContentIsA400NamingThePart) {
  // {"type": 1} used to throw inside the JSON library (a 500).
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[{"role":"user","content":[{"type":1}]}]})"),
            "messages[0].content[0].type");
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})"),
            "messages[0].content[0].text");
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[{"role":"u","content":"x"},{"role":"user","content":[{"type":"image_url"}]}]})"),
            "messages[1].content[0].type");
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[{"role":"user","content":5}]})"), "messages[0].content");
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[{"role":7,"content":"x"}]})"), "messages[0].role");
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[]})"), "messages");
  // Text parts are joined into one string, the caller's key order kept.
  auto ok = ReadChatBody(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->messages[0]["content"], "a\nb");
}

TEST(RestRequest, TypesAndShapes) {
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","max_tokens":"16"})"), "max_tokens");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","max_tokens":16.5})"), "max_tokens");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","stop":[1]})"), "stop");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":[[]]})"), "prompt");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({})"), "prompt");
  EXPECT_EQ(Refused(ReadCompletionBody, R"([1,2])"), "(none)");
  EXPECT_EQ(Refused(ReadCompletionBody, std::string(100, '[') + std::string(100, ']')), "(none)");
  EXPECT_EQ(Refused(ReadCompletionBody, "{\"prompt\":\"\xff\"}"), "(none)");  // not UTF-8
  // Long lists are cut at one past the limit; the validator refuses them.
  std::string stops = R"({"prompt":"x","stop":[)";
  for (int i = 0; i < 100000; ++i) stops += std::string(i ? "," : "") + "\"s\"";
  auto many = ReadCompletionBody(stops + "]}");
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(many->fields.stop.size(), static_cast<std::size_t>(service::kMaxStopStrings) + 1);
  // Seeds: any integer, as OpenAI's.
  auto seeded = ReadCompletionBody(R"({"prompt":"x","seed":-1})");
  ASSERT_TRUE(seeded.ok());
  EXPECT_EQ(*seeded->fields.seed, ~std::uint64_t{0});
}

TEST(RestRequest, ChatAndCompletionLogprobsShapes) {
  auto chat = ReadChatBody(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":3})");
  ASSERT_TRUE(chat.ok());
  EXPECT_TRUE(chat->logprobs);
  EXPECT_EQ(chat->fields.top_logprobs, 3);
  auto without = ReadChatBody(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":3})");
  ASSERT_FALSE(without.ok());
  EXPECT_EQ(without.status().param(), "top_logprobs");
  auto completion = ReadCompletionBody(R"({"prompt":"x","logprobs":0})");
  ASSERT_TRUE(completion.ok());
  EXPECT_TRUE(completion->logprobs);
  EXPECT_EQ(completion->fields.top_logprobs, 0);
  EXPECT_FALSE(ReadCompletionBody(R"({"prompt":"x"})")->logprobs);
}

TEST(RestRequest, QaBodies) {
  auto one = ReadQaBody(R"({"question":"q","context":"c","top_k":2,"scoring":"logits"})");
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->batch);
  ASSERT_EQ(one->inputs.size(), 1u);
  EXPECT_EQ(one->fields.top_k, 2);
  auto batch = ReadQaBody(R"({"inputs":[{"question":"a","context":"b"},{"question":"c","context":"d"}]})");
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE(batch->batch);
  EXPECT_EQ(batch->inputs.size(), 2u);
  EXPECT_EQ(Refused(ReadQaBody, R"({"inputs":[{"question":"a"}]})"), "inputs[0].context");
  EXPECT_EQ(Refused(ReadQaBody, R"({"inputs":[{"question":"a","context":"b"}],"question":"x"})"), "inputs");
  EXPECT_EQ(Refused(ReadQaBody, R"({"question":"q"})"), "context");
}

}  // namespace
}  // namespace ropeserve::api
