// Black-box tests of the REST API on a tiny generated model.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <set>
#include <thread>

#include "server/api/http/http_server.h"
#include "server/api/rest/rest_handlers.h"
#include "server/api/serving_context.h"
#include "server/models/decoder.h"
#include "server/service/generation_service.h"
#include "server/tokenizer/tokenizer.h"
#include "tests/api/http_fixture.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/common/offline.h"

namespace ropeserve {
namespace {

using json = nlohmann::json;

TEST_F(HttpApi, HealthAndModels) {
  auto h = client_->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = client_->Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(json::parse(m->body)["data"][0]["id"], "tiny");
}

TEST_F(HttpApi, GreedyCompletionEqualsOfflineGenerate) {
  auto [code, body] =
      Post(R"({"model":"tiny","prompt":[5,6,7],"max_tokens":6,"temperature":0,"ignore_eos":true,"logprobs":2})");
  ASSERT_EQ(code, 200) << body.dump();
  service::GenerationFields o;
  o.max_tokens = 6;
  o.ignore_eos = true;
  auto want = testing::OfflineGenerate(*model_, {5, 6, 7}, o);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(body["choices"][0]["token_ids"].get<std::vector<std::int64_t>>(), want->generated_ids);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(body["usage"]["completion_tokens"], 6);
  EXPECT_EQ(body["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
}

// The request's seed reaches the sampler: the same seed gives the offline
// engine's draw with that seed (so a server that ignored `seed` for a fixed
// one would fail), and other seeds give other draws.
TEST_F(HttpApi, SeededSamplingIsReproducible) {
  const auto draw = [&](int seed) {
    auto [code, body] = Post(R"({"prompt":[[5,6]],"max_tokens":8,"temperature":1.0,"seed":)" + std::to_string(seed) +
                             R"(,"ignore_eos":true})");
    EXPECT_EQ(code, 200) << body.dump();
    return body["choices"][0]["token_ids"].get<std::vector<std::int64_t>>();
  };
  const std::vector<std::int64_t> a = draw(123);
  EXPECT_EQ(draw(123), a);
  service::GenerationFields o;
  o.max_tokens = 8;
  o.ignore_eos = true;
  o.temperature = 1.0;
  o.seed = 123;
  auto want = testing::OfflineGenerate(*model_, {5, 6}, o);
  ASSERT_TRUE(want.ok()) << want.status().message();
  EXPECT_EQ(a, want->generated_ids);
  // Eight draws at temperature 1 over the tiny model's vocabulary: four
  // other seeds all repeating seed 123's sequence would mean the seed is
  // not used.
  std::set<std::vector<std::int64_t>> others;
  for (int seed : {1, 2, 3, 4}) others.insert(draw(seed));
  others.erase(a);
  EXPECT_FALSE(others.empty());
}

TEST_F(HttpApi, BadRequestsGetClearErrors) {
  EXPECT_EQ(Post("{not json").first, 400);
  EXPECT_EQ(Post(R"({"max_tokens":3})").first, 400);
  EXPECT_EQ(Post(R"({"prompt":[1],"model":"other"})").first, 404);
  EXPECT_EQ(Post(R"({"prompt":["a","b"],"max_tokens":1})").first, 200);
  EXPECT_EQ(Post(R"({"prompt":"bad utf8 \udc00"})").first, 400);
  EXPECT_EQ(Post(R"({"prompt":[1],"stop":[1]})").first, 400);
  EXPECT_EQ(Post(R"({"prompt":[1],"stop":""})").first, 400);
  EXPECT_EQ(Post(R"({"prompt":[1,99999]})").first, 400);
  EXPECT_EQ(Post(R"({"prompt":[1],"max_tokens":"many"})").first, 400);
  EXPECT_EQ(Post(R"({"prompt":[1],"temperature":-1})").first, 400);
  EXPECT_EQ(Post(R"({"prompt":[1],"max_tokens":100000})").first, 400);
  auto [code, body] = Post(R"({"prompt":[1],"top_p":0})");
  EXPECT_EQ(code, 400);
  EXPECT_NE(body["error"]["message"].get<std::string>().find("top_p"), std::string::npos);
  EXPECT_EQ(Post(R"({"prompt":[)" + std::string(5000, '1') + "]}").first, 413);
  // The server is still healthy after all of that.
  auto ok = Post(R"({"prompt":[1],"max_tokens":1})");
  EXPECT_EQ(ok.first, 200);
}

TEST_F(HttpApi, ConcurrentRequestsAreBatchedWithUnchangedOutputs) {
  constexpr int kClients = 12;
  std::vector<std::thread> threads;
  std::vector<std::vector<std::int64_t>> got(kClients);
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", server_->port());
      c.set_read_timeout(60, 0);
      json body = {{"prompt", {i + 1, i + 2, i + 3}},
                   {"max_tokens", 8},
                   {"temperature", 0},
                   {"ignore_eos", true},
                   {"return_token_ids", true}};
      auto r = c.Post("/v1/completions", body.dump(), "application/json");
      if (r && r->status == 200)
        got[i] = json::parse(r->body)["choices"][0]["token_ids"].get<std::vector<std::int64_t>>();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    service::GenerationFields o;
    o.max_tokens = 8;
    o.ignore_eos = true;
    auto want = testing::OfflineGenerate(*model_, {i + 1, i + 2, i + 3}, o);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(got[i], want->generated_ids) << "client " << i;
  }
  EXPECT_EQ(service_->engine().pool().num_free(), service_->kv_cache().num_blocks);
}

}  // namespace
}  // namespace ropeserve

namespace ropeserve {
namespace {

std::string Decode(const tok::Tokenizer& t, const json& ids) {
  return *t.Decode(ids.get<std::vector<TokenId>>(), true);
}

TEST_F(HttpApi, TextPromptsAreTokenizedAndOutputIsDecoded) {
  auto [code, body] =
      Post(R"({"prompt":"Hello world, how are you?","max_tokens":8,"temperature":0,"ignore_eos":true})");
  ASSERT_EQ(code, 200) << body.dump();
  const auto ids = tokenizer_->Encode("Hello world, how are you?", true)->ids;
  EXPECT_EQ(body["usage"]["prompt_tokens"], ids.size());
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["text"], Decode(*tokenizer_, choice["token_ids"]));
  // The same prompt as ids gives the same output.
  auto [code2, body2] = Post(json{{"prompt", ids}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}}.dump());
  ASSERT_EQ(code2, 200);
  EXPECT_EQ(body2["choices"][0]["token_ids"], choice["token_ids"]);
  EXPECT_EQ(body2["choices"][0]["text"], choice["text"]);
  // Logprob tokens are rendered as text.
  auto [code3, body3] = Post(R"({"prompt":"Hello","max_tokens":2,"temperature":0,"ignore_eos":true,"logprobs":2})");
  ASSERT_EQ(code3, 200);
  EXPECT_EQ(body3["choices"][0]["logprobs"]["tokens"][0],
            Decode(*tokenizer_, json::array({body3["choices"][0]["token_ids"][0]})));
}

TEST_F(HttpApi, StopStringsAndStopTokenIdsEndGenerationEarly) {
  const std::string base = R"("prompt":"Once upon a time","max_tokens":24,"temperature":0,"ignore_eos":true)";
  auto [code, full] = Post("{" + base + "}");
  ASSERT_EQ(code, 200);
  const std::string text = full["choices"][0]["text"];
  ASSERT_GE(text.size(), 12u) << text;
  // A stop string taken from the middle of the free-running output.
  const std::string stop = text.substr(text.size() / 2, 3);
  const size_t cut = text.find(stop);
  auto [c2, stopped] = Post("{" + base + ",\"stop\":[\"zzzz-never\"," + json(stop).dump() + "]}");
  ASSERT_EQ(c2, 200) << stopped.dump();
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(stopped["choices"][0]["text"], text.substr(0, cut));
  EXPECT_LT(stopped["choices"][0]["token_ids"].size(), full["choices"][0]["token_ids"].size());
  // Stop token ids: generation ends with the first such token.
  const auto third = full["choices"][0]["token_ids"][2];
  auto [c3, by_id] = Post("{" + base + ",\"stop_token_ids\":[" + third.dump() + "]}");
  ASSERT_EQ(c3, 200);
  EXPECT_EQ(by_id["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(by_id["choices"][0]["token_ids"].back(), third);
  EXPECT_LE(by_id["choices"][0]["token_ids"].size(), 3u);
}

TEST_F(HttpApi, ChatCompletionsRenderTheChatTemplate) {
  const json messages =
      json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi there"}}});
  auto [code, body] =
      Post(json{{"messages", messages}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}}.dump(),
           "/v1/chat/completions");
  ASSERT_EQ(code, 200) << body.dump();
  EXPECT_EQ(body["object"], "chat.completion");
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_EQ(choice["message"]["content"], Decode(*tokenizer_, choice["token_ids"]));
  // The prompt is the rendered template, tokenized without extra specials.
  auto rendered = service_->ApplyChatTemplate(nlohmann::ordered_json::parse(messages.dump()), true,
                                              nlohmann::ordered_json::object());
  ASSERT_TRUE(rendered.ok());
  EXPECT_NE(rendered->find("<|im_start|>assistant\n"), std::string::npos) << *rendered;
  EXPECT_EQ(body["usage"]["prompt_tokens"], tokenizer_->Encode(*rendered, false)->ids.size());

  // Content parts are flattened to the same prompt.
  auto [cp, parts] = Post(
      R"({"messages":[{"role":"system","content":[{"type":"text","text":"Be brief."}]},)"
      R"({"role":"user","content":[{"type":"text","text":"Hi there"}]}],"max_tokens":6,"temperature":0,"ignore_eos":true})",
      "/v1/chat/completions");
  ASSERT_EQ(cp, 200) << parts.dump();
  EXPECT_EQ(parts["choices"][0]["token_ids"], choice["token_ids"]);
  // Unsupported content part types are a 400 naming the part.
  auto [image_status, image] =
      Post(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", "/v1/chat/completions");
  EXPECT_EQ(image_status, 400);
  EXPECT_EQ(image["error"]["param"], "messages[0].content[0].type") << image.dump();
  EXPECT_EQ(Post(R"({"messages":[]})", "/v1/chat/completions").first, 400);
  EXPECT_EQ(Post(R"({"messages":[{"content":"no role"}]})", "/v1/chat/completions").first, 400);
  EXPECT_EQ(Post(R"({"messages":"hi"})", "/v1/chat/completions").first, 400);
  EXPECT_EQ(Post(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":3})", "/v1/chat/completions").first,
            400);
  auto [c2, lp] =
      Post(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2,"logprobs":true,"top_logprobs":2})",
           "/v1/chat/completions");
  ASSERT_EQ(c2, 200) << lp.dump();
  EXPECT_EQ(lp["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
}

TEST_F(HttpApi, LogitBiasBansAndForcesTokensAndLogprobsHaveOpenAiShapes) {
  const std::string base = R"("prompt":[1,2,3],"max_tokens":4,"temperature":0,"ignore_eos":true)";
  auto [c0, plain] = Post("{" + base + "}");
  ASSERT_EQ(c0, 200) << plain.dump();
  const auto first = plain["choices"][0]["token_ids"][0].get<int>();
  auto [c1, banned] = Post("{" + base + R"(,"logit_bias":{")" + std::to_string(first) + R"(":-100}})");
  ASSERT_EQ(c1, 200) << banned.dump();
  for (const auto& id : banned["choices"][0]["token_ids"]) EXPECT_NE(id.get<int>(), first);
  auto [c2, forced] = Post("{" + base + R"(,"logit_bias":{"9":100},"logprobs":1})");
  ASSERT_EQ(c2, 200) << forced.dump();
  EXPECT_EQ(forced["choices"][0]["token_ids"], json::array({9, 9, 9, 9}));
  // Logprobs stay the model's (a forced token is usually unlikely).
  const json& lp = forced["choices"][0]["logprobs"];
  EXPECT_LT(lp["token_logprobs"][0].get<double>(), 0.0);
  // text_offset: bytes of the token texts before each token.
  ASSERT_EQ(lp["text_offset"].size(), 4u);
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(lp["text_offset"][i], offset);
    offset += static_cast<std::int64_t>(lp["tokens"][i].get<std::string>().size());
  }
  EXPECT_EQ(Post("{" + base + R"(,"logit_bias":{"999999":1}})").first, 400);
  // Chat logprobs carry each token's UTF-8 bytes.
  auto [c3, chat] =
      Post(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":3,"logprobs":true,"top_logprobs":1})",
           "/v1/chat/completions");
  ASSERT_EQ(c3, 200) << chat.dump();
  for (const auto& e : chat["choices"][0]["logprobs"]["content"]) {
    std::string bytes;
    for (const auto& b : e["bytes"]) bytes.push_back(static_cast<char>(b.get<int>()));
    EXPECT_EQ(bytes, e["token"].get<std::string>());
    EXPECT_EQ(e["top_logprobs"][0]["bytes"].size(), e["top_logprobs"][0]["token"].get<std::string>().size());
  }
}

// OpenAI's echo (with logprobs: the prompt scored, as lm-eval uses it) and
// vLLM's prompt_logprobs, unary and streamed.
TEST_F(HttpApi, EchoAndPromptLogprobs) {
  const std::vector<std::int64_t> prompt = {5, 9, 14, 3, 7};
  const std::string base = R"("prompt":[5,9,14,3,7],"max_tokens":3,"temperature":0,"ignore_eos":true)";
  auto [c0, plain] = Post("{" + base + R"(,"logprobs":1})");
  ASSERT_EQ(c0, 200) << plain.dump();
  auto [c1, echo] = Post("{" + base + R"(,"echo":true,"logprobs":1})");
  ASSERT_EQ(c1, 200) << echo.dump();
  const json& ch = echo["choices"][0];
  const std::string prompt_text = *tokenizer_->Decode({5, 9, 14, 3, 7}, false);
  EXPECT_EQ(ch["text"], prompt_text + plain["choices"][0]["text"].get<std::string>());
  const json& lp = ch["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), prompt.size() + 3);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (std::size_t i = 1; i < prompt.size(); ++i) EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0) << i;
  // The completion's part is what it is without echo.
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(lp["token_logprobs"][prompt.size() + i], plain["choices"][0]["logprobs"]["token_logprobs"][i]);
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < lp["tokens"].size(); ++i) {
    EXPECT_EQ(lp["text_offset"][i], offset) << i;
    offset += static_cast<std::int64_t>(lp["tokens"][i].get<std::string>().size());
  }
  // Echo without logprobs: the text only. n > 1: every choice echoes.
  auto [c2, texts] = Post("{" + base + R"(,"echo":true,"n":2,"seed":1,"temperature":1})");
  ASSERT_EQ(c2, 200) << texts.dump();
  for (const auto& c : texts["choices"]) {
    EXPECT_EQ(c["text"].get<std::string>().rfind(prompt_text, 0), 0u);
    EXPECT_TRUE(c["logprobs"].is_null());
  }
  // vLLM's prompt_logprobs: the same numbers, in vLLM's shape.
  auto [c3, vllm] = Post("{" + base + R"(,"prompt_logprobs":0})");
  ASSERT_EQ(c3, 200) << vllm.dump();
  const json& pl = vllm["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(pl.size(), prompt.size());
  EXPECT_TRUE(pl[0].is_null());
  for (std::size_t i = 1; i < prompt.size(); ++i) {
    ASSERT_EQ(pl[i].size(), 1u);
    EXPECT_EQ(pl[i][std::to_string(prompt[i])]["logprob"], lp["token_logprobs"][i]) << i;
    EXPECT_GE(pl[i][std::to_string(prompt[i])]["rank"].get<int>(), 1) << i;
  }
  // With alternatives: ranked 1, 2 in order; the prompt token's rank is 1
  // exactly when it is the first alternative.
  auto [c5, two] = Post("{" + base + R"(,"prompt_logprobs":2})");
  ASSERT_EQ(c5, 200) << two.dump();
  for (std::size_t i = 1; i < prompt.size(); ++i) {
    const json& step = two["choices"][0]["prompt_logprobs"][i];
    int ones = 0;
    for (const auto& [id, e] : step.items()) ones += e["rank"] == 1;
    EXPECT_EQ(ones, 1) << step.dump();
    EXPECT_EQ(step[std::to_string(prompt[i])]["logprob"], pl[i][std::to_string(prompt[i])]["logprob"]);
  }
  // Streamed: the first chunk carries the echo and the prompt's logprobs.
  auto r =
      client_->Post("/v1/completions", "{" + base + R"(,"echo":true,"logprobs":1,"stream":true})", "application/json");
  ASSERT_TRUE(r);
  std::string text;
  json tokens = json::array(), lps = json::array();
  for (std::size_t at = 0; (at = r->body.find("data: {", at)) != std::string::npos; ++at) {
    const json c = json::parse(r->body.substr(at + 6, r->body.find("\n\n", at) - at - 6));
    for (const auto& choice : c["choices"]) {
      text += choice["text"].get<std::string>();
      for (const auto& t : choice["logprobs"]["tokens"]) tokens.push_back(t);
      for (const auto& t : choice["logprobs"]["token_logprobs"]) lps.push_back(t);
    }
  }
  EXPECT_EQ(json(text), ch["text"]);
  EXPECT_EQ(tokens, lp["tokens"]);
  EXPECT_EQ(lps, lp["token_logprobs"]);
  // Chat: vLLM's prompt_logprobs at the top level.
  auto [c4, chat] = Post(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1,"prompt_logprobs":1})",
                         "/v1/chat/completions");
  ASSERT_EQ(c4, 200) << chat.dump();
  EXPECT_EQ(chat["prompt_logprobs"].size(), chat["usage"]["prompt_tokens"]);
}

TEST_F(HttpApi, TokenizeDetokenizeVersionModels) {
  auto [c1, t] = PostRaw(R"({"prompt":"Hello world","return_token_strs":true})", "/tokenize");
  ASSERT_EQ(c1, 200) << t.dump();
  const auto expected = tokenizer_->Encode("Hello world", true)->ids;
  EXPECT_EQ(t["tokens"], json(expected));
  EXPECT_EQ(t["count"], expected.size());
  EXPECT_EQ(t["max_model_len"], service_->max_model_len());
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(t["token_strs"][i], *tokenizer_->IdToToken(expected[i]));
  auto [c2, d] = PostRaw(json{{"tokens", t["tokens"]}}.dump(), "/detokenize");
  ASSERT_EQ(c2, 200) << d.dump();
  EXPECT_EQ(d["prompt"], *tokenizer_->Decode(expected, false));
  // Chat messages are rendered as chat completions render them.
  auto [c3, chat] = PostRaw(R"({"messages":[{"role":"user","content":"Hi"}]})", "/tokenize");
  ASSERT_EQ(c3, 200) << chat.dump();
  auto [c4, gen] = Post(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1})", "/v1/chat/completions");
  ASSERT_EQ(c4, 200);
  EXPECT_EQ(chat["count"], gen["usage"]["prompt_tokens"]);
  EXPECT_EQ(PostRaw(R"({"tokens":[-1]})", "/detokenize").first, 400);
  EXPECT_EQ(PostRaw(R"({"prompt":"x","model":"other"})", "/tokenize").first, 404);
  auto v = client_->Get("/version");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->status, 200);
  EXPECT_TRUE(json::parse(v->body)["version"].is_string());
  auto m = client_->Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(json::parse(m->body)["data"][0]["task"], "generate");
}

// Templates that write <think> blocks: the reasoning comes apart from the
// content, unary and streamed alike.
TEST(HttpApiReasoning, ThinkBlocksBecomeReasoningContent) {
  ReasoningService model;
  model.Start();
  if (::testing::Test::HasFatalFailure()) return;
  service::GenerationService& svc = *model.service;
  const std::string body =
      R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"temperature":0,"ignore_eos":true)";
  auto [code, unary] = api::HandleChatCompletion(svc, body + "}");
  ASSERT_EQ(code, 200) << unary;
  const json msg = json::parse(unary)["choices"][0]["message"];
  ASSERT_TRUE(msg["reasoning_content"].is_string()) << msg.dump();
  EXPECT_FALSE(msg["reasoning_content"].get<std::string>().empty());
  EXPECT_TRUE(msg["content"].is_null()) << msg.dump();
  // Streamed: the deltas' reasoning joins to the same text.
  auto reply = api::ChatCompletions(svc, api::RestRequest{.body = body + R"(,"stream":true})"});
  ASSERT_TRUE(reply.ok() && reply->events);
  std::string events;
  while (!reply->events->Poll(events, std::chrono::milliseconds(100))) {
  }
  std::string reasoning, content;
  for (std::size_t at = 0; (at = events.find("data: {", at)) != std::string::npos; ++at) {
    const json chunk = json::parse(events.substr(at + 6, events.find("\n\n", at) - at - 6));
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, msg["reasoning_content"].get<std::string>());
  EXPECT_EQ(content, "");
  // include_reasoning: false drops it.
  auto [c2, dropped] = api::HandleChatCompletion(svc, body + R"(,"include_reasoning":false})");
  ASSERT_EQ(c2, 200);
  EXPECT_TRUE(json::parse(dropped)["choices"][0]["message"]["reasoning_content"].is_null());
}

// Without a tokenizer the server still serves token ids and says why text
// is refused.
TEST(HttpApiNoTokenizer, TextPromptIsAClearError) {
  testing::ScratchDir dir;
  testing::MakeTinyCheckpoint(dir.path(), testing::TinyOptions("llama"));
  auto m = DecoderModel::Load(dir.path(), DType::kF32);
  ASSERT_TRUE(m.ok());
  service::EngineOptions eo;
  eo.kv_cache_memory = "8M";
  auto svc = ServeDecoder(**m, "tiny", eo);
  ASSERT_TRUE(svc.ok());
  auto [code, body] = api::HandleCompletion(**svc, R"({"prompt":"hello"})");
  EXPECT_EQ(code, 400);
  EXPECT_NE(body.find("tokenizer"), std::string::npos) << body;
  EXPECT_EQ(api::HandleCompletion(**svc, R"({"prompt":[1],"max_tokens":1})").first, 200);
  EXPECT_EQ(api::HandleChatCompletion(**svc, R"({"messages":[{"role":"user","content":"x"}]})").first, 400);
}

}  // namespace
}  // namespace ropeserve
