// Reading REST bodies (server/api/rest/rest_request.h): strict about unknown
// fields and unsupported values, 400 naming the field, never an exception.
#include "server/api/rest/rest_request.h"

#include <gtest/gtest.h>

#include <set>

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
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","best_of":2})"), "best_of");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","suffix":"end"})"), "suffix");
  EXPECT_EQ(Refused(ReadSummarizeBody, R"({"text":"x","prompt_logprobs":1})"), "prompt_logprobs");
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[{"role":"user","content":"x"}],"prompt_logprobs":1,"stream":true})"),
            "prompt_logprobs");
  // Echo with logprobs: the prompt's tokens get the same number of alternatives.
  auto echo = ReadCompletionBody(R"({"prompt":"x","echo":true,"logprobs":2})");
  ASSERT_TRUE(echo.ok());
  EXPECT_TRUE(echo->echo);
  EXPECT_EQ(echo->fields.prompt_logprobs, 2);
  EXPECT_FALSE(echo->prompt_logprobs);  // not vLLM's field: no prompt_logprobs in the answer
  // ... streamed with any n: every choice carries its prompt's logprobs.
  EXPECT_TRUE(ReadCompletionBody(R"({"prompt":"x","echo":true,"logprobs":1,"stream":true,"n":2})").ok());
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)";
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("guided_grammar":"root ::= \"a\""})"), "guided_grammar");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("structured_outputs":{"grammar":"x"}})"), "structured_outputs.grammar");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("modalities":["text","audio"]})"), "modalities");
  // The same fields with values that ask for nothing are accepted.
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","echo":false,"best_of":1,"suffix":null,)"
                                        R"("user":"u1"})"),
            "");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("response_format":{"type":"text"},"tools":[],"tool_choice":"none",)"
                                         R"("store":false,"metadata":{"k":"v"},"modalities":["text"]})"),
            "");
}

TEST(RestRequest, VllmTokenAndOutputOptionsAreRead) {
  auto b = ReadCompletionBody(R"({"prompt":"x","allowed_token_ids":[5,3],"bad_words":["a b","c"],)"
                              R"("include_stop_str_in_output":true,"skip_special_tokens":false})");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->fields.allowed_token_ids, (std::vector<std::int64_t>{5, 3}));
  EXPECT_EQ(b->fields.bad_words, (std::vector<std::string>{"a b", "c"}));
  EXPECT_EQ(b->fields.include_stop_str_in_output, true);
  EXPECT_EQ(b->fields.skip_special_tokens, false);
  auto none = ReadChatBody(R"({"messages":[{"role":"user","content":"x"}],"allowed_token_ids":null})");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->fields.allowed_token_ids.has_value());
  EXPECT_TRUE(ReadSummarizeBody(R"({"text":"x","bad_words":["y"],"allowed_token_ids":[1]})").ok());
  // An empty list is given (the validator refuses it), not absent.
  auto empty = ReadCompletionBody(R"({"prompt":"x","allowed_token_ids":[]})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->fields.allowed_token_ids.has_value());
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","allowed_token_ids":[1.5]})"), "allowed_token_ids");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","allowed_token_ids":"5"})"), "allowed_token_ids");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","bad_words":"w"})"), "bad_words");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","bad_words":[1]})"), "bad_words");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","include_stop_str_in_output":1})"),
            "include_stop_str_in_output");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","skip_special_tokens":"no"})"), "skip_special_tokens");
  // truncate_prompt_tokens: completions and chat (a summary chunks its text).
  EXPECT_EQ(ReadCompletionBody(R"({"prompt":"x","truncate_prompt_tokens":-1})")->fields.truncate_prompt_tokens, -1);
  EXPECT_EQ(ReadChatBody(R"({"messages":[{"role":"user","content":"x"}],"truncate_prompt_tokens":8})")
                ->fields.truncate_prompt_tokens,
            8);
  EXPECT_EQ(Refused(ReadSummarizeBody, R"({"text":"x","truncate_prompt_tokens":8})"), "truncate_prompt_tokens");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","truncate_prompt_tokens":"8"})"), "truncate_prompt_tokens");
}

// Every request field of OpenAI's API reference (2026-11) is honoured or
// refused by name; none is unknown to the server. A new OpenAI field makes
// this list grow and the test say which table (rest_request.cc) lacks it.
TEST(RestRequest, EveryOpenAiFieldIsHonouredOrRefusedByName) {
  struct Case {
    const char* field;
    const char* value;  // a value that asks for the feature
  };
  const Case shared[] = {
      {"model", R"("m")"},
      {"max_tokens", "5"},
      {"temperature", "0.5"},
      {"top_p", "0.9"},
      {"seed", "3"},
      {"stop", R"(["x"])"},
      {"stream", "true"},
      {"stream_options", R"({"include_usage":true})"},
      {"n", "2"},
      {"frequency_penalty", "0.5"},
      {"presence_penalty", "0.5"},
      {"logit_bias", R"({"5":-100})"},
      {"user", R"("u")"},
      {"safety_identifier", R"("s")"},
      {"prompt_cache_key", R"("k")"},
  };
  const Case completion_only[] = {
      {"logprobs", "2"}, {"echo", "true"}, {"suffix", R"("end")"}, {"best_of", "3"}, {"prompt_logprobs", "1"},
  };
  const Case chat_only[] = {
      {"logprobs", "true"},
      {"top_logprobs", R"(2,"logprobs":true)"},
      {"max_completion_tokens", "5"},
      {"metadata", R"({"k":"v"})"},
      {"service_tier", R"("auto")"},
      {"parallel_tool_calls", "false"},
      {"store", "true"},
      {"tools", R"([{"type":"function","function":{"name":"f"}}])"},
      {"tool_choice", R"("auto","tools":[{"type":"function","function":{"name":"f"}}])"},
      {"functions", R"([{"name":"f"}])"},
      {"function_call", R"("auto")"},
      {"modalities", R"(["text","audio"])"},
      {"audio", R"({"voice":"x","format":"wav"})"},
      {"prediction", R"({"type":"content","content":"x"})"},
      {"reasoning_effort", R"("low")"},
      {"verbosity", R"("low")"},
      {"web_search_options", "{}"},
      {"response_format", R"({"type":"json_object"})"},
  };
  // Honoured: read into the request. Refused: a 400 naming the field.
  const std::set<std::string> refused = {
      "suffix",     "best_of",          "store",     "functions",         "function_call", "modalities", "audio",
      "prediction", "reasoning_effort", "verbosity", "web_search_options"};
  auto check = [&](auto read, const std::string& head, const Case& c) {
    const std::string body = head + ",\"" + c.field + "\":" + c.value + "}";
    auto r = read(body);
    if (refused.count(c.field)) {
      ASSERT_FALSE(r.ok()) << body;
      EXPECT_EQ(r.status().param(), c.field) << body;
      EXPECT_EQ(r.status().reason(), "unsupported_parameter") << body;
    } else {
      EXPECT_TRUE(r.ok()) << body << ": " << r.status().ToString();
    }
  };
  for (const Case& c : shared) {
    check(ReadCompletionBody, R"({"prompt":"x")", c);
    check(ReadChatBody, R"({"messages":[{"role":"user","content":"x"}])", c);
  }
  for (const Case& c : completion_only) check(ReadCompletionBody, R"({"prompt":"x")", c);
  for (const Case& c : chat_only) check(ReadChatBody, R"({"messages":[{"role":"user","content":"x"}])", c);
  // What the honoured ones became.
  auto b = ReadCompletionBody(R"({"prompt":"x","logit_bias":{"5":-100,"7":2.5},"priority":-3})");
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->fields.logit_bias.size(), 2u);
  EXPECT_EQ(b->fields.logit_bias[1], (std::pair<std::int64_t, double>(7, 2.5)));
  EXPECT_EQ(b->fields.priority, -3);
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","logit_bias":{"a5":1}})"), "logit_bias");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","logit_bias":{"5":"1"}})"), "logit_bias");
  EXPECT_EQ(Refused(ReadCompletionBody, R"({"prompt":"x","logit_bias":[1]})"), "logit_bias");
  auto unknown = ReadCompletionBody(R"({"prompt":"x","frobnicate":1})");
  EXPECT_EQ(unknown.status().reason(), "unknown_parameter");
}

TEST(RestRequest, ToolCallHistoryIsParsedForTheTemplate) {
  auto ok =
      ReadChatBody(R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",)"
                   R"("function":{"name":"w","arguments":"{\"city\": \"Paris\", \"n\": [1, 2]}"}}]},)"
                   R"({"role":"tool","tool_call_id":"c1","content":"18"}]})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  const auto& args = ok->messages[0]["tool_calls"][0]["function"]["arguments"];
  ASSERT_TRUE(args.is_object());
  EXPECT_EQ(args["city"], "Paris");
  EXPECT_EQ(args.begin().key(), "city");  // the caller's key order
  EXPECT_EQ(Refused(ReadChatBody,
                    R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"w","arguments":"{x"}}]}]})"),
            "messages[0].tool_calls[0].function.arguments");
  EXPECT_EQ(
      Refused(ReadChatBody, R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}]})"),
      "messages[0].tool_calls[0].function.name");
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[{"role":"user","tool_calls":[]}]})"), "messages[0].tool_calls");
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[{"role":"tool","tool_call_id":5,"content":"x"}]})"),
            "messages[0].tool_call_id");
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  EXPECT_EQ(
      Refused(ReadChatBody, R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"w","arguments":")" +
                                deep + R"("}}]}]})"),
      "messages[0].tool_calls[0].function.arguments");
}

TEST(RestRequest, TokenizeAndDetokenizeBodies) {
  auto p = ReadTokenizeBody(R"({"prompt":"hi","return_token_strs":true})");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->chat);
  EXPECT_TRUE(p->add_special_tokens);
  EXPECT_TRUE(p->return_token_strs);
  auto c = ReadTokenizeBody(R"({"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false})");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->chat);
  EXPECT_FALSE(c->add_special_tokens);  // the template writes them (vLLM's default)
  EXPECT_FALSE(c->add_generation_prompt);
  EXPECT_EQ(Refused(ReadTokenizeBody, R"({})"), "prompt");
  EXPECT_EQ(Refused(ReadTokenizeBody, R"({"prompt":"x","messages":[{"role":"user","content":"x"}]})"), "prompt");
  EXPECT_EQ(Refused(ReadTokenizeBody, R"({"prompt":"x","continue_final_message":true})"), "continue_final_message");
  auto d = ReadDetokenizeBody(R"({"tokens":[1,2,3]})");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(Refused(ReadDetokenizeBody, R"({"tokens":["a"]})"), "tokens");
  EXPECT_EQ(Refused(ReadDetokenizeBody, R"({"tokens":[1],"x":1})"), "x");
}

TEST(RestRequest, MalformedChatContentIsA400NamingThePart) {
  // {"type": 1} used to throw inside the JSON library (a 500).
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[{"role":"user","content":[{"type":1}]}]})"),
            "messages[0].content[0].type");
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})"),
            "messages[0].content[0].text");
  EXPECT_EQ(Refused(ReadChatBody,
                    R"({"messages":[{"role":"u","content":"x"},{"role":"user","content":[{"type":"image_url"}]}]})"),
            "messages[1].content[0].type");
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[{"role":"user","content":5}]})"), "messages[0].content");
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[{"role":7,"content":"x"}]})"), "messages[0].role");
  EXPECT_EQ(Refused(ReadChatBody, R"({"messages":[]})"), "messages");
  // Text parts are joined into one string, the caller's key order kept.
  auto ok = ReadChatBody(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})");
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

// /v1/embeddings (OpenAI's four input shapes) and TEI's /embed.
TEST(RestRequest, EmbeddingBodies) {
  auto openai = [](const std::string& body) { return ReadEmbeddingsBody(body, false); };
  auto tei = [](const std::string& body) { return ReadEmbeddingsBody(body, true); };
  auto one = openai(R"({"model":"m","input":"hello","encoding_format":"base64","dimensions":8,"user":"u"})");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_EQ(one->inputs.size(), 1u);
  EXPECT_EQ(one->inputs[0].text, "hello");
  EXPECT_FALSE(one->inputs[0].ids);
  EXPECT_TRUE(one->base64);
  EXPECT_EQ(one->options.dimensions, 8);
  EXPECT_TRUE(one->options.normalize);
  auto texts = openai(R"({"input":["a","b"],"normalize":false})");
  ASSERT_TRUE(texts.ok());
  EXPECT_EQ(texts->inputs.size(), 2u);
  EXPECT_FALSE(texts->options.normalize);
  auto ids = openai(R"({"input":[1,2,3]})");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->inputs.size(), 1u);
  EXPECT_EQ(*ids->inputs[0].ids, (std::vector<TokenId>{1, 2, 3}));
  auto lists = openai(R"({"input":[[1],[2,3]]})");
  ASSERT_TRUE(lists.ok());
  ASSERT_EQ(lists->inputs.size(), 2u);
  EXPECT_EQ(*lists->inputs[1].ids, (std::vector<TokenId>{2, 3}));
  EXPECT_EQ(Refused(openai, R"({"model":"m"})"), "input");
  EXPECT_EQ(Refused(openai, R"({"input":[]})"), "input");
  EXPECT_EQ(Refused(openai, R"({"input":[1,"a"]})"), "input[1]");
  EXPECT_EQ(Refused(openai, R"({"input":["a",{"x":1}]})"), "input[1]");
  EXPECT_EQ(Refused(openai, R"({"input":[[1,-2]]})"), "input[0][1]");
  EXPECT_EQ(Refused(openai, R"({"input":[3000000000]})"), "input[0]");
  EXPECT_EQ(Refused(openai, R"({"input":"a","encoding_format":"int8"})"), "encoding_format");
  EXPECT_EQ(Refused(openai, R"({"input":"a","dimensions":0})"), "dimensions");
  EXPECT_EQ(Refused(openai, R"({"input":"a","dimensions":"8"})"), "dimensions");
  EXPECT_EQ(Refused(openai, R"({"input":"a","truncate_prompt_tokens":8})"), "truncate_prompt_tokens");
  EXPECT_EQ(Refused(openai, R"({"input":"a","inputs":"b"})"), "inputs");
  auto t = tei(R"({"inputs":["a"],"normalize":false,"truncate":true,"truncation_direction":"Left",
                   "prompt_name":"query"})");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->tei);
  EXPECT_TRUE(t->options.truncate);
  EXPECT_TRUE(t->options.truncate_left);
  EXPECT_EQ(t->options.prompt_name, "query");
  EXPECT_EQ(Refused(tei, R"({"inputs":"a","truncation_direction":"up"})"), "truncation_direction");
  EXPECT_EQ(Refused(tei, R"({"input":"a"})"), "input");
  EXPECT_EQ(Refused(tei, R"({"inputs":"a","encoding_format":"float"})"), "encoding_format");
}

// vLLM's /classify and TEI's /predict (a text, a pair, or a batch of
// those, as TEI reads them).
TEST(RestRequest, ClassifyBodies) {
  auto vllm = [](const std::string& body) { return ReadClassifyBody(body, false); };
  auto tei = [](const std::string& body) { return ReadClassifyBody(body, true); };
  auto one = vllm(R"({"model":"m","input":"hello","activation":false,"user":"u"})");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_EQ(one->inputs.size(), 1u);
  EXPECT_EQ(one->inputs[0].text, "hello");
  EXPECT_EQ(one->options.activation, service::ClassifyOptions::Activation::kNone);
  auto two = vllm(R"({"input":["a","b"],"truncate":true})");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->inputs.size(), 2u);
  EXPECT_TRUE(two->options.truncate);
  EXPECT_EQ(two->options.activation, service::ClassifyOptions::Activation::kClassify);
  EXPECT_EQ(Refused(vllm, R"({"input":[]})"), "input");
  EXPECT_EQ(Refused(vllm, R"({"input":[1]})"), "input[0]");
  EXPECT_EQ(Refused(vllm, R"({"model":"m"})"), "input");
  EXPECT_EQ(Refused(vllm, R"({"input":"a","truncate_prompt_tokens":3})"), "truncate_prompt_tokens");
  EXPECT_EQ(Refused(vllm, R"({"input":"a","activation":"no"})"), "activation");
  auto pair = tei(R"({"inputs":["what","a fox"],"raw_scores":true,"truncation_direction":"Left"})");
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  ASSERT_EQ(pair->inputs.size(), 1u);  // a two-text list is one pair
  EXPECT_EQ(pair->inputs[0].pair, "a fox");
  EXPECT_FALSE(pair->tei_batch);
  EXPECT_TRUE(pair->options.truncate_left);
  EXPECT_EQ(pair->options.activation, service::ClassifyOptions::Activation::kNone);
  auto batch = tei(R"({"inputs":[["q","d"],"t","u"]})");
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE(batch->tei_batch);
  ASSERT_EQ(batch->inputs.size(), 3u);
  EXPECT_EQ(batch->inputs[0].pair, "d");
  EXPECT_FALSE(batch->inputs[1].pair);
  auto single = tei(R"({"inputs":["only"]})");
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(single->tei_batch);
  EXPECT_EQ(Refused(tei, R"({"inputs":[["a","b","c"]]})"), "inputs[0]");
  EXPECT_EQ(Refused(tei, R"({"inputs":7})"), "inputs");
  EXPECT_EQ(Refused(tei, R"({"input":"a"})"), "input");
}

// vLLM's /score (1:1, 1:N, N:N), /rerank in vLLM's Jina/Cohere shape and in TEI's.
TEST(RestRequest, ScoreAndRerankBodies) {
  auto score = [](const std::string& body) { return ReadScoreBody(body, false); };
  auto rerank = [](const std::string& body) { return ReadScoreBody(body, true); };
  auto one_n = score(R"({"model":"m","text_1":"q","text_2":["a","b"]})");
  ASSERT_TRUE(one_n.ok()) << one_n.status().ToString();
  EXPECT_EQ(one_n->shape, ScoreBody::Shape::kScore);
  EXPECT_EQ(one_n->queries, (std::vector<std::string>{"q"}));
  EXPECT_EQ(one_n->documents.size(), 2u);
  EXPECT_TRUE(score(R"({"text_1":["q","r"],"text_2":["a","b"]})").ok());
  EXPECT_EQ(Refused(score, R"({"text_1":["q","r"],"text_2":["a","b","c"]})"), "text_1");
  EXPECT_EQ(Refused(score, R"({"text_1":"q"})"), "text_2");
  EXPECT_EQ(Refused(score, R"({"text_1":"q","text_2":"d","truncate_prompt_tokens":2})"), "truncate_prompt_tokens");
  auto jina = rerank(R"({"model":"m","query":"q","documents":["a",{"text":"b"}],"top_n":1,"return_documents":false,
                         "activation":false})");
  ASSERT_TRUE(jina.ok()) << jina.status().ToString();
  EXPECT_EQ(jina->shape, ScoreBody::Shape::kRerank);
  EXPECT_EQ(jina->documents, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(jina->top_n, 1);
  EXPECT_FALSE(jina->return_documents);
  EXPECT_TRUE(jina->options.raw);
  EXPECT_EQ(Refused(rerank, R"({"query":"q","documents":"a"})"), "documents");
  EXPECT_EQ(Refused(rerank, R"({"query":"q","documents":[{"text":1}]})"), "documents[0]");
  EXPECT_EQ(Refused(rerank, R"({"query":"q","documents":["a"],"top_n":-1})"), "top_n");
  EXPECT_EQ(Refused(rerank, R"({"query":"q","documents":["a"],"max_chunks_per_doc":2})"), "max_chunks_per_doc");
  EXPECT_EQ(Refused(rerank, R"({"documents":["a"]})"), "query");
  EXPECT_EQ(Refused(rerank, R"({"query":["q"],"documents":["a"]})"), "query");
  auto t = rerank(R"({"query":"q","texts":["a","b"],"raw_scores":true,"return_text":true,"truncate":true})");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape, ScoreBody::Shape::kTeiRerank);
  EXPECT_TRUE(t->return_documents);
  EXPECT_TRUE(t->options.raw);
  EXPECT_TRUE(t->options.truncate);
  EXPECT_EQ(Refused(rerank, R"({"query":"q","texts":["a"],"top_n":1})"), "top_n");  // not in TEI's shape
}

// /v1/token-classify: transformers' aggregation_strategy and ignore_labels
// (defaults: simple, ["O"]), /v1/qa's offset units, TEI's truncation.
TEST(RestRequest, TokenClassifyBodies) {
  auto d = ReadTokenClassifyBody(R"({"model":"ner","input":"Ann lives in Paris"})");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->model, "ner");
  ASSERT_EQ(d->inputs.size(), 1u);
  EXPECT_EQ(d->options.aggregation, qa::Aggregation::kSimple);
  EXPECT_EQ(d->options.ignore_labels, (std::vector<std::string>{"O"}));
  EXPECT_EQ(d->offset_unit, qa::OffsetUnit::kCodePoint);
  EXPECT_FALSE(d->options.truncate);
  auto all = ReadTokenClassifyBody(R"({"input":["a","b"],"aggregation_strategy":"FIRST","ignore_labels":[],
                                       "offset_unit":"utf16","truncate":true,"truncation_direction":"Left"})");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->inputs.size(), 2u);
  EXPECT_EQ(all->options.aggregation, qa::Aggregation::kFirst);
  EXPECT_TRUE(all->options.ignore_labels.empty());
  EXPECT_EQ(all->offset_unit, qa::OffsetUnit::kUtf16);
  EXPECT_TRUE(all->options.truncate && all->options.truncate_left);
  EXPECT_EQ(Refused(ReadTokenClassifyBody, R"({"model":"ner"})"), "input");
  EXPECT_EQ(Refused(ReadTokenClassifyBody, R"({"input":[]})"), "input");
  EXPECT_EQ(Refused(ReadTokenClassifyBody, R"({"input":"a","aggregation_strategy":"mean"})"), "aggregation_strategy");
  EXPECT_EQ(Refused(ReadTokenClassifyBody, R"({"input":"a","ignore_labels":"O"})"), "ignore_labels");
  EXPECT_EQ(Refused(ReadTokenClassifyBody, R"({"input":"a","ignore_labels":["O",1]})"), "ignore_labels[1]");
  EXPECT_EQ(Refused(ReadTokenClassifyBody, R"({"input":"a","offset_unit":"bytes"})"), "offset_unit");
  EXPECT_EQ(Refused(ReadTokenClassifyBody, R"({"input":"a","stride":16})"), "stride");
  EXPECT_EQ(Refused(ReadTokenClassifyBody, R"({"input":"a","truncation_direction":"up"})"), "truncation_direction");
  EXPECT_EQ(Refused(ReadTokenClassifyBody, R"({"input":"a","labels":["x"]})"), "labels");
}

// The Hugging Face pipeline's shape, multi-passage questions, offset units.
TEST(RestRequest, QaPipelineShapeAndPassages) {
  auto hf = ReadQaBody(
      R"({"inputs":{"question":"q","context":"c"},"parameters":{"top_k":3,"handle_impossible_answer":true}})");
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_FALSE(hf->batch);
  ASSERT_EQ(hf->inputs.size(), 1u);
  EXPECT_EQ(hf->inputs[0].context, "c");
  EXPECT_EQ(hf->fields.top_k, 3);
  EXPECT_EQ(hf->fields.handle_impossible_answer, true);
  auto list = ReadQaBody(R"({"inputs":[{"question":"q","context":"c"}],"parameters":{"top_k":2},"top_k":5})");
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->batch);
  EXPECT_EQ(list->fields.top_k, 2);  // parameters win
  auto multi = ReadQaBody(
      R"({"question":"q","contexts":["a",{"id":"x","text":"b"},{"id":7,"text":"c"}],"offset_unit":"utf16"})");
  ASSERT_TRUE(multi.ok()) << multi.status().ToString();
  ASSERT_EQ(multi->inputs.size(), 1u);
  const QaInput& in = multi->inputs[0];
  EXPECT_TRUE(in.multi);
  ASSERT_EQ(in.passages.size(), 3u);
  EXPECT_FALSE(in.passages[0].id);
  EXPECT_EQ(in.passages[1].id, "x");
  EXPECT_EQ(in.passages[2].id, "7");
  EXPECT_TRUE(in.passages[2].id_is_number);
  EXPECT_EQ(in.passages[2].text, "c");
  EXPECT_EQ(multi->fields.offset_unit, "utf16");
  EXPECT_EQ(Refused(ReadQaBody, R"({"question":"q","context":"c","contexts":["a"]})"), "context");
  EXPECT_EQ(Refused(ReadQaBody, R"({"question":"q","contexts":[]})"), "contexts");
  EXPECT_EQ(Refused(ReadQaBody, R"({"question":"q","contexts":[{"text":"a","extra":1}]})"), "contexts[0].extra");
  EXPECT_EQ(Refused(ReadQaBody, R"({"question":"q","contexts":[{"id":1.5,"text":"a"}]})"), "contexts[0].id");
  EXPECT_EQ(Refused(ReadQaBody, R"({"inputs":[{"question":"q","contexts":[3]}]})"), "inputs[0].contexts[0]");
  EXPECT_EQ(Refused(ReadQaBody, R"({"inputs":{"question":"q","context":"c"},"parameters":{"bogus":1}})"),
            "parameters.bogus");
  EXPECT_EQ(Refused(ReadQaBody, R"({"question":"q","context":"c","parameters":{}})"), "inputs");
}

// Structured output fields become one Constraint naming its field; two
// at once, bad shapes and tool_choice with a format are refused by name.
TEST(RestRequest, StructuredOutputFields) {
  using K = structured::Constraint::Kind;
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)";
  struct Case {
    std::string body;
    K kind;
    std::string param;
  };
  const Case ok[] = {
      {chat + R"("response_format":{"type":"json_object"}})", K::kJsonObject, "response_format"},
      {chat +
           R"("response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"b":{},"a":{}}}}}})",
       K::kJsonSchema, "response_format"},
      {chat + R"("guided_json":"{\"type\":\"integer\"}"})", K::kJsonSchema, "guided_json"},
      {chat + R"("guided_regex":"[a-z]+"})", K::kRegex, "guided_regex"},
      {chat + R"("guided_choice":["yes","no"]})", K::kChoice, "guided_choice"},
      {chat + R"("structured_outputs":{"choice":["a"],"disable_any_whitespace":true}})", K::kChoice,
       "structured_outputs.choice"},
      {chat + R"("structured_outputs":{"json_object":true}})", K::kJsonObject, "structured_outputs.json_object"},
      {chat + R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"})", K::kJsonSchema,
       "tools"},
      {chat +
           R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}})",
       K::kJsonSchema, "tool_choice"},
  };
  for (const Case& c : ok) {
    auto b = ReadChatBody(c.body);
    ASSERT_TRUE(b.ok()) << c.body << ": " << b.status().ToString();
    EXPECT_EQ(b->fields.constraint.kind, c.kind) << c.body;
    EXPECT_EQ(b->fields.constraint.param, c.param) << c.body;
  }
  // The schema keeps the caller's property order (the output follows it).
  auto ordered = ReadChatBody(ok[1].body);
  EXPECT_NE(ordered->fields.constraint.text.find(R"("b":{},"a":{})"), std::string::npos)
      << ordered->fields.constraint.text;
  // Completions and summaries read the same fields.
  auto comp = ReadCompletionBody(R"({"prompt":"x","guided_regex":"\\d+"})");
  ASSERT_TRUE(comp.ok());
  EXPECT_EQ(comp->fields.constraint.text, "\\d+");
  auto sum = ReadSummarizeBody(R"({"text":"x","response_format":{"type":"json_object"}})");
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->fields.constraint.kind, K::kJsonObject);

  EXPECT_EQ(Refused(ReadChatBody, chat + R"("response_format":{"type":"xml"}})"), "response_format");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("response_format":{"type":"json_schema"}})"), "response_format");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("guided_json":"{not json"})"), "guided_json");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("guided_regex":7})"), "guided_regex");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("guided_choice":"a"})"), "guided_choice");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("guided_choice":["a",1]})"), "guided_choice");
  // An empty regex or list is read; the validator refuses it
  // (request_params_test.cc: GuidedRegexAndChoiceLimits).
  EXPECT_TRUE(ReadChatBody(chat + R"("guided_choice":[]})").ok());
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("structured_outputs":{"frobnicate":1}})"), "structured_outputs.frobnicate");
  EXPECT_EQ(Refused(ReadChatBody, chat + R"("guided_regex":"a","guided_choice":["a"]})"), "guided_choice");
  EXPECT_EQ(
      Refused(
          ReadChatBody,
          chat +
              R"("response_format":{"type":"json_object"},"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"})"),
      "tool_choice");
}

}  // namespace
}  // namespace ropeserve::api
