// OpenAI's Responses API (POST /v1/responses, GET / DELETE
// /v1/responses/{id}, POST .../cancel) on a tiny generated model: the chat
// path in the Responses API's shapes. Each answer is checked against the
// chat endpoint's for the same conversation (same prompt tokens, same
// seeded output), streamed against unary, function calls against the chat's
// tool calls, and stored responses against the API key that made them.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/api/rest/response_store.h"
#include "tests/api/http_fixture.h"

namespace ropeserve {
namespace {

using json = nlohmann::json;

// Reads an SSE answer of named events; each event's data, in order.
std::vector<json> StreamResponse(int port, const json& body, const char* key) {
  const std::string raw =
      StreamBody(port, "/v1/responses", body.dump(), {{"Authorization", std::string("Bearer ") + key}});
  std::vector<json> out;
  for (size_t pos = 0, end; (end = raw.find("\n\n", pos)) != std::string::npos; pos = end + 2) {
    const std::string e = raw.substr(pos, end - pos);
    const std::size_t nl = e.find('\n');
    EXPECT_TRUE(e.rfind("event: ", 0) == 0 && nl != std::string::npos && e.compare(nl + 1, 6, "data: ") == 0) << e;
    if (nl == std::string::npos) continue;
    json data = json::parse(e.substr(nl + 7), nullptr, false);
    EXPECT_EQ(data.value("type", ""), e.substr(7, nl - 7));
    out.push_back(std::move(data));
  }
  return out;
}

// The response a stream describes, rebuilt from its item events as the
// SDK does (not from the final event's copy), checking the order rules:
// sequence numbers 0, 1, 2, ...; created and in_progress first; items
// added before their deltas; every item done before the end.
json Accumulate(const std::vector<json>& events) {
  json r;
  std::set<std::size_t> open;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    EXPECT_EQ(e["sequence_number"], i) << e.dump();
    const std::string type = e["type"];
    if (i == 0) {
      EXPECT_EQ(type, "response.created");
    } else if (i == 1) {
      EXPECT_EQ(type, "response.in_progress");
    }
    if (type == "response.created") {
      r = e["response"];
      EXPECT_EQ(r["status"], "in_progress");
      EXPECT_TRUE(r["output"].empty());
    } else if (type == "response.output_item.added") {
      EXPECT_EQ(e["output_index"], r["output"].size());
      open.insert(r["output"].size());
      r["output"].push_back(e["item"]);
    } else if (type == "response.content_part.added") {
      json& item = r["output"][e["output_index"].get<std::size_t>()];
      EXPECT_EQ(e["item_id"], item["id"]);
      EXPECT_EQ(e["content_index"], item["content"].size());
      item["content"].push_back(e["part"]);
    } else if (type == "response.output_text.delta" || type == "response.reasoning_text.delta") {
      json& part = r["output"][e["output_index"].get<std::size_t>()]["content"][e["content_index"].get<std::size_t>()];
      part["text"] = part["text"].get<std::string>() + e["delta"].get<std::string>();
    } else if (type == "response.function_call_arguments.delta") {
      json& item = r["output"][e["output_index"].get<std::size_t>()];
      item["arguments"] = item["arguments"].get<std::string>() + e["delta"].get<std::string>();
    } else if (type == "response.output_text.done" || type == "response.reasoning_text.done") {
      const json& part =
          r["output"][e["output_index"].get<std::size_t>()]["content"][e["content_index"].get<std::size_t>()];
      EXPECT_EQ(part["text"], e["text"]);
    } else if (type == "response.function_call_arguments.done") {
      EXPECT_EQ(r["output"][e["output_index"].get<std::size_t>()]["arguments"], e["arguments"]);
    } else if (type == "response.output_item.done") {
      const std::size_t k = e["output_index"];
      EXPECT_EQ(open.erase(k), 1u) << "item " << k << " done twice or never added";
      json item = r["output"][k];
      if (e["item"].contains("status")) item["status"] = e["item"]["status"];
      if (item.contains("summary")) item["summary"] = e["item"]["summary"];
      EXPECT_EQ(item, e["item"]);
      r["output"][k] = e["item"];
    } else if (type == "response.completed" || type == "response.incomplete" || type == "response.failed") {
      EXPECT_EQ(i + 1, events.size()) << "events after " << type;
      EXPECT_TRUE(open.empty());
      json final = e["response"];
      EXPECT_EQ(final["output"], r["output"]);
      r = final;
    }
  }
  return r;
}

// A response without what differs between two runs of the same request.
json Comparable(json r) {
  for (const char* k : {"id", "created_at", "completed_at"}) r.erase(k);
  for (auto& item : r["output"]) item.erase("id");
  // Prompt tokens read from the prefix cache depend on what ran before.
  if (r["usage"].is_object()) r["usage"]["input_tokens_details"].erase("cached_tokens");
  return r;
}

std::string OutputText(const json& r) {
  std::string out;
  for (const auto& item : r["output"])
    if (item["type"] == "message")
      for (const auto& part : item["content"]) out += part["text"].get<std::string>();
  return out;
}

class Responses : public HttpApi {
 protected:
  void SetUp() override {
    auto keys = api::ApiKeys::Load({"key-one", "key-two"}, "");
    ASSERT_TRUE(keys.ok());
    ctx_.api_keys = std::move(*keys);
    HttpApi::SetUp();
  }
  std::pair<int, json> Call(const char* method, const std::string& path, const json& body = nullptr,
                            const char* key = "key-one") {
    const httplib::Headers h = {{"Authorization", std::string("Bearer ") + key}};
    httplib::Result r = std::string(method) == "GET" ? client_->Get(path.c_str(), h)
                        : std::string(method) == "DELETE"
                            ? client_->Delete(path.c_str(), h)
                            : client_->Post(path.c_str(), h, body.is_null() ? "" : body.dump(), "application/json");
    if (!r) return {-1, json()};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  std::pair<int, json> Create(const json& body, const char* key = "key-one") {
    return Call("POST", "/v1/responses", body, key);
  }
  std::pair<int, json> Chat(json body) {
    body["return_token_ids"] = true;
    return Call("POST", "/v1/chat/completions", body);
  }
};

TEST_F(Responses, AreTheChatPathInTheResponsesShapes) {
  auto [cc, chat] = Chat({{"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                                    {{"role", "user"}, {"content", "Hi there"}}})},
                          {"max_tokens", 8},
                          {"temperature", 0}});
  ASSERT_EQ(cc, 200) << chat.dump();
  for (const json& input :
       {json("Hi there"), json::array({{{"role", "user"}, {"content", "Hi there"}}}),
        json::array({{{"type", "message"},
                      {"role", "user"},
                      {"content", json::array({{{"type", "input_text"}, {"text", "Hi there"}}})}}})}) {
    SCOPED_TRACE(input.dump());
    auto [code, r] = Create({{"model", "tiny"},
                             {"instructions", "Be brief."},
                             {"input", input},
                             {"max_output_tokens", 8},
                             {"temperature", 0},
                             {"metadata", {{"job", "a"}}}});
    ASSERT_EQ(code, 200) << r.dump();
    EXPECT_EQ(r["object"], "response");
    EXPECT_EQ(r["id"].get<std::string>().rfind("resp_", 0), 0u);
    EXPECT_EQ(r["model"], "tiny");
    EXPECT_EQ(r["instructions"], "Be brief.");
    EXPECT_EQ(r["metadata"], json({{"job", "a"}}));
    const json& choice = chat["choices"][0];
    EXPECT_EQ(json(OutputText(r)), choice["message"]["content"].is_string() ? choice["message"]["content"] : json(""));
    const bool cut = choice["finish_reason"] == "length";
    EXPECT_EQ(r["status"], cut ? "incomplete" : "completed");
    EXPECT_EQ(r["incomplete_details"], cut ? json({{"reason", "max_output_tokens"}}) : json(nullptr));
    EXPECT_EQ(r["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
    EXPECT_EQ(r["usage"]["output_tokens"], chat["usage"]["completion_tokens"]);
    EXPECT_EQ(r["usage"]["total_tokens"], chat["usage"]["total_tokens"]);
    ASSERT_EQ(r["output"].size(), 1u);
    EXPECT_EQ(r["output"][0]["type"], "message");
    EXPECT_EQ(r["output"][0]["id"].get<std::string>().rfind("msg_", 0), 0u);
    EXPECT_EQ(r["output"][0]["status"], cut ? "incomplete" : "completed");
  }
}

TEST_F(Responses, StreamTheSameResponse) {
  for (int seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const json body = {
        {"input", "Tell me more."}, {"max_output_tokens", 12 * seed}, {"temperature", 1.0}, {"seed", seed}};
    auto [code, unary] = Create(body);
    ASSERT_EQ(code, 200) << unary.dump();
    json streamed_body = body;
    streamed_body["stream"] = true;
    const std::vector<json> events = StreamResponse(server_->port(), streamed_body, "key-one");
    ASSERT_GE(events.size(), 3u);
    const json streamed = Accumulate(events);
    EXPECT_EQ(Comparable(streamed), Comparable(unary));
    // The streamed response was stored too.
    auto [gc, got] = Call("GET", "/v1/responses/" + streamed["id"].get<std::string>());
    ASSERT_EQ(gc, 200) << got.dump();
    EXPECT_EQ(got, streamed);
  }
}

// A function-tool round trip: the call comes back as a function_call item
// with the chat's arguments; its output goes back as function_call_output
// and renders the prompt the chat endpoint renders for the same history.
TEST_F(Responses, FunctionCallRoundTrip) {
  const json params = json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})");
  const json user = {{"role", "user"}, {"content", "Weather in Paris?"}};
  int calls = 0;
  for (int seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto [cc, chat] = Chat(
        {{"messages", json::array({user})},
         {"tools", json::array({{{"type", "function"}, {"function", {{"name", "weather"}, {"parameters", params}}}}})},
         {"tool_choice", "required"},
         {"max_tokens", 64},
         {"temperature", 1.0},
         {"seed", seed}});
    ASSERT_EQ(cc, 200) << chat.dump();
    auto [code, r] =
        Create({{"input", json::array({user})},
                {"tools",
                 json::array({{{"type", "function"}, {"name", "weather"}, {"parameters", params}, {"strict", true}}})},
                {"tool_choice", "required"},
                {"max_output_tokens", 64},
                {"temperature", 1.0},
                {"seed", seed}});
    ASSERT_EQ(code, 200) << r.dump();
    EXPECT_EQ(r["tools"][0], json({{"type", "function"},
                                   {"name", "weather"},
                                   {"description", nullptr},
                                   {"parameters", params},
                                   {"strict", true}}));
    const json& choice = chat["choices"][0];
    if (choice["finish_reason"] != "tool_calls") continue;
    ASSERT_EQ(r["output"].size(), choice["message"]["tool_calls"].size()) << r.dump();
    json input = json::array({user});
    json history = json::array({user, {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}}});
    for (std::size_t k = 0; k < r["output"].size(); ++k) {
      const json& item = r["output"][k];
      const json& call = choice["message"]["tool_calls"][k];
      EXPECT_EQ(item["type"], "function_call");
      EXPECT_EQ(item["name"], "weather");
      EXPECT_EQ(item["arguments"], call["function"]["arguments"]);
      EXPECT_EQ(item["call_id"].get<std::string>().rfind("call_", 0), 0u);
      EXPECT_EQ(item["status"], "completed");
      input.push_back(item);
      input.push_back({{"type", "function_call_output"}, {"call_id", item["call_id"]}, {"output", "Sunny, 21 C"}});
      history[1]["tool_calls"].push_back({{"id", item["call_id"]},
                                          {"type", "function"},
                                          {"function", {{"name", "weather"}, {"arguments", item["arguments"]}}}});
    }
    for (const auto& item : r["output"])
      history.push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", "Sunny, 21 C"}});
    // The SDK sends earlier output items back as they came.
    auto [fc, follow] = Create({{"input", input}, {"max_output_tokens", 4}, {"temperature", 0}});
    ASSERT_EQ(fc, 200) << follow.dump();
    auto [hc, reference] = Chat({{"messages", history}, {"max_tokens", 4}, {"temperature", 0}});
    ASSERT_EQ(hc, 200) << reference.dump();
    EXPECT_EQ(follow["usage"]["input_tokens"], reference["usage"]["prompt_tokens"]);
    EXPECT_EQ(json(OutputText(follow)), reference["choices"][0]["message"]["content"]);
    // previous_response_id: the same conversation from the store.
    json outputs = json::array();
    for (const auto& item : r["output"])
      outputs.push_back({{"type", "function_call_output"}, {"call_id", item["call_id"]}, {"output", "Sunny, 21 C"}});
    auto [pc, continued] =
        Create({{"previous_response_id", r["id"]}, {"input", outputs}, {"max_output_tokens", 4}, {"temperature", 0}});
    ASSERT_EQ(pc, 200) << continued.dump();
    EXPECT_EQ(continued["previous_response_id"], r["id"]);
    EXPECT_EQ(continued["usage"]["input_tokens"], reference["usage"]["prompt_tokens"]);
    EXPECT_EQ(OutputText(continued), OutputText(follow));
    ++calls;
  }
  EXPECT_GE(calls, 2) << "too few seeds finished their calls";
}

TEST_F(Responses, JsonSchemaFormatConstrainsTheText) {
  const json schema = json::parse(
      R"({"type":"object","properties":{"w":{"enum":["a","b"]}},"required":["w"],"additionalProperties":false})");
  int parsed = 0;
  for (int seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto [code, r] =
        Create({{"input", "Give me JSON."},
                {"text", {{"format", {{"type", "json_schema"}, {"name", "w"}, {"schema", schema}, {"strict", true}}}}},
                {"max_output_tokens", 48},
                {"temperature", 1.0},
                {"seed", seed}});
    ASSERT_EQ(code, 200) << r.dump();
    EXPECT_EQ(r["text"]["format"]["name"], "w");
    if (r["status"] != "completed") continue;
    const json value = json::parse(OutputText(r), nullptr, false);
    ASSERT_TRUE(value.is_object()) << OutputText(r);
    EXPECT_TRUE(value["w"] == "a" || value["w"] == "b") << value.dump();
    ++parsed;
  }
  EXPECT_GE(parsed, 1) << "no seed finished its JSON within max_output_tokens";
}

TEST_F(Responses, BadRequestsNameTheField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"input", "x"}, {"frobnicate", 1}}, "frobnicate"},
      {{{"input", "x"}, {"stop", json::array({"a"})}}, "stop"},
      {{{"max_output_tokens", 4}}, "input"},
      {{{"input", json::array({{{"role", "user"}, {"content", "a"}}, {{"type", "image"}}})}}, "input[1].type"},
      {{{"input", json::array({{{"role", "robot"}, {"content", "a"}}})}}, "input[0].role"},
      {{{"input", json::array({{{"role", "user"}, {"content", "a"}, {"color", 1}}})}}, "input[0].color"},
      {{{"input", "x"}, {"tools", json::array({{{"type", "web_search"}}})}}, "tools[0].type"},
      {{{"input", "x"}, {"tools", json::array({{{"type", "function"}, {"name", "bad name"}}})}}, "tools[0].name"},
      {{{"input", "x"}, {"max_output_tokens", -1}}, "max_output_tokens"},
      {{{"input", "x"}, {"text", {{"format", {{"type", "yaml"}}}}}}, "text.format.type"},
      {{{"input", "x"}, {"truncation", "auto"}}, "truncation"},
      {{{"input", "x"}, {"background", true}, {"store", false}}, "background"},
      {{{"input", "x"}, {"previous_response_id", "resp_nope"}}, "previous_response_id"},
  };
  for (const auto& [body, param] : cases) {
    SCOPED_TRACE(body.dump());
    auto [code, r] = Create(body);
    EXPECT_TRUE(code == 400 || code == 404) << code;
    EXPECT_EQ(r["error"]["param"], param) << r.dump();
  }
}

// A response belongs to the key that made it: another key gets 404 for
// GET, DELETE, cancel and previous_response_id alike. store: false keeps
// nothing.
TEST_F(Responses, StoredResponsesBelongToTheirKey) {
  auto [code, r] = Create({{"input", "Hello"}, {"max_output_tokens", 4}});
  ASSERT_EQ(code, 200) << r.dump();
  const std::string path = "/v1/responses/" + r["id"].get<std::string>();
  auto [gc, got] = Call("GET", path);
  ASSERT_EQ(gc, 200);
  EXPECT_EQ(got, r);
  EXPECT_EQ(Call("GET", path, nullptr, "key-two").first, 404);
  EXPECT_EQ(Call("DELETE", path, nullptr, "key-two").first, 404);
  EXPECT_EQ(Call("POST", path + "/cancel", nullptr, "key-two").first, 404);
  EXPECT_EQ(Create({{"input", "x"}, {"previous_response_id", r["id"]}}, "key-two").first, 404);
  EXPECT_EQ(Create({{"input", "x"}, {"previous_response_id", r["id"]}, {"max_output_tokens", 2}}).first, 200);
  // Only background responses can be cancelled.
  EXPECT_EQ(Call("POST", path + "/cancel").first, 400);
  auto [dc, deleted] = Call("DELETE", path);
  ASSERT_EQ(dc, 200);
  EXPECT_EQ(deleted, json({{"id", r["id"]}, {"object", "response"}, {"deleted", true}}));
  EXPECT_EQ(Call("GET", path).first, 404);
  auto [nc, unstored] = Create({{"input", "Hello"}, {"max_output_tokens", 2}, {"store", false}});
  ASSERT_EQ(nc, 200);
  EXPECT_EQ(unstored["store"], false);
  EXPECT_EQ(Call("GET", "/v1/responses/" + unstored["id"].get<std::string>()).first, 404);
}

// GET /v1/responses/{id}/input_items lists the thread a response was made
// from, as the openai SDK pages it: the earlier turn's input and output
// items, then its own input (with the client's ids kept), newest first
// unless order=asc; after / before / limit page it; only its key sees it.
TEST_F(Responses, InputItemsListTheThread) {
  auto [c1, first] = Create({{"input", "Hello"}, {"max_output_tokens", 4}});
  ASSERT_EQ(c1, 200) << first.dump();
  const json next = {{"id", "msg_client_given"},
                     {"type", "message"},
                     {"role", "user"},
                     {"content", json::array({{{"type", "input_text"}, {"text", "Next"}}})}};
  auto [c2, second] =
      Create({{"input", json::array({next})}, {"previous_response_id", first["id"]}, {"max_output_tokens", 4}});
  ASSERT_EQ(c2, 200) << second.dump();
  const std::string path = "/v1/responses/" + second["id"].get<std::string>() + "/input_items";

  auto [ca, asc] = Call("GET", path + "?order=asc");
  ASSERT_EQ(ca, 200) << asc.dump();
  EXPECT_EQ(asc["object"], "list");
  EXPECT_EQ(asc["has_more"], false);
  json expected = json::array();
  json hello = asc["data"][0];
  EXPECT_EQ(hello["id"].get<std::string>().rfind("msg_", 0), 0u) << hello.dump();
  expected.push_back({{"id", hello["id"]},
                      {"type", "message"},
                      {"role", "user"},
                      {"content", json::array({{{"type", "input_text"}, {"text", "Hello"}}})},
                      {"status", "completed"}});
  for (const auto& item : first["output"]) expected.push_back(item);
  json given = next;
  given["status"] = "completed";
  expected.push_back(given);
  EXPECT_EQ(asc["data"], expected);
  EXPECT_EQ(asc["first_id"], expected.front()["id"]);
  EXPECT_EQ(asc["last_id"], expected.back()["id"]);

  // The default order is newest first.
  auto [cd, desc] = Call("GET", path);
  ASSERT_EQ(cd, 200);
  json reversed = expected;
  std::reverse(reversed.begin(), reversed.end());
  EXPECT_EQ(desc["data"], reversed);

  // Pages of one, by after, as the SDK's auto-pagination asks.
  json paged = json::array();
  std::string cursor;
  for (int i = 0; i < 10; ++i) {
    auto [cp, page] = Call("GET", path + "?order=asc&limit=1" + (cursor.empty() ? "" : "&after=" + cursor));
    ASSERT_EQ(cp, 200) << page.dump();
    ASSERT_EQ(page["data"].size(), 1u);
    paged.push_back(page["data"][0]);
    cursor = page["last_id"];
    if (!page["has_more"].get<bool>()) break;
  }
  EXPECT_EQ(paged, expected);
  // before: the items just ahead of the cursor.
  auto [cb, before] = Call("GET", path + "?order=asc&limit=1&before=msg_client_given");
  ASSERT_EQ(cb, 200);
  EXPECT_EQ(before["data"], json::array({expected[expected.size() - 2]}));
  EXPECT_EQ(before["has_more"], expected.size() > 2);

  for (const char* bad :
       {"?limit=0", "?limit=101", "?limit=x", "?order=up", "?after=msg_nope", "?include=nope", "?page=2"}) {
    auto [code, error] = Call("GET", path + bad);
    EXPECT_EQ(code, 400) << bad << " " << error.dump();
    EXPECT_FALSE(error["error"]["param"].is_null()) << bad << " " << error.dump();
  }
  EXPECT_EQ(Call("GET", path, nullptr, "key-two").first, 404);
  EXPECT_EQ(Call("GET", path + "?include=reasoning.encrypted_content").first, 200);
}

// background: true answers at once (queued) and the response is polled to
// its end; it is the response the same request makes in the foreground.
TEST_F(Responses, BackgroundResponsesArePolledToTheirEnd) {
  const json body = {{"input", "Hello"}, {"max_output_tokens", 16}, {"temperature", 1.0}, {"seed", 7}};
  json background_body = body;
  background_body["background"] = true;
  auto [code, queued] = Create(background_body);
  ASSERT_EQ(code, 200) << queued.dump();
  EXPECT_EQ(queued["status"], "queued");
  EXPECT_EQ(queued["background"], true);
  const std::string path = "/v1/responses/" + queued["id"].get<std::string>();
  json done;
  for (int i = 0; i < 600; ++i) {
    // The run holds an admission ticket until its final state is stored
    // (a drain waits for it): no ticket out means it has finished.
    const int in_flight = ctx_.lifecycle.in_flight();
    auto [gc, got] = Call("GET", path);
    ASSERT_EQ(gc, 200) << got.dump();
    const bool finished = got["status"] != "queued" && got["status"] != "in_progress";
    if (in_flight == 0) {
      EXPECT_TRUE(finished) << "a running background response holds no ticket";
    }
    if (finished) {
      done = got;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(done.is_null()) << "the background response did not finish in 30 s";
  EXPECT_TRUE(ctx_.lifecycle.WaitIdle(std::chrono::seconds(10))) << "the finished run kept its ticket";
  auto [fc, foreground] = Create(body);
  ASSERT_EQ(fc, 200);
  json a = Comparable(done), b = Comparable(foreground);
  a.erase("background");
  b.erase("background");
  EXPECT_EQ(a, b);
  // Cancelling a finished background response leaves it as it is.
  auto [cc, cancelled] = Call("POST", path + "/cancel");
  ASSERT_EQ(cc, 200);
  EXPECT_EQ(cancelled, done);
}

// Templates that write <think> blocks: the reasoning is a reasoning item
// (its text as reasoning_text, and as its summary when asked), unary and
// streamed alike, and counted in reasoning_tokens.
TEST(ResponsesReasoning, ThinkBlocksBecomeReasoningItems) {
  ReasoningService model;
  model.Start();
  if (::testing::Test::HasFatalFailure()) return;
  service::GenerationService& svc = *model.service;
  const std::string body = R"({"input":"Hi","max_output_tokens":6,"temperature":0,"reasoning":{"summary":"auto"})";
  auto unary = api::CreateResponse(svc, api::RestRequest{.body = body + "}"});
  ASSERT_TRUE(unary.ok()) << unary.status().ToString();
  const json r = json::parse(unary->body);
  ASSERT_EQ(r["output"].size(), 1u) << r.dump();
  const json& item = r["output"][0];
  EXPECT_EQ(item["type"], "reasoning");
  EXPECT_EQ(item["id"].get<std::string>().rfind("rs_", 0), 0u);
  const std::string thought = item["content"][0]["text"];
  EXPECT_FALSE(thought.empty());
  EXPECT_EQ(item["content"][0]["type"], "reasoning_text");
  EXPECT_EQ(item["summary"], json::array({{{"type", "summary_text"}, {"text", thought}}}));
  const auto tokens = svc.Tokenize(thought, false);
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], std::min<std::size_t>(tokens->size(), 6));
  EXPECT_EQ(r["status"], "incomplete");
  // Streamed: the same item, through reasoning_text and summary events.
  auto reply = api::CreateResponse(svc, api::RestRequest{.body = body + R"(,"stream":true})"});
  ASSERT_TRUE(reply.ok() && reply->events);
  std::string raw;
  while (!reply->events->Poll(raw, std::chrono::milliseconds(100))) {
  }
  std::vector<json> events;
  std::string types;
  for (std::size_t at = 0; (at = raw.find("data: {", at)) != std::string::npos; ++at) {
    events.push_back(json::parse(raw.substr(at + 6, raw.find("\n\n", at) - at - 6)));
    types += events.back()["type"].get<std::string>() + " ";
  }
  EXPECT_NE(types.find("response.reasoning_text.delta"), std::string::npos) << types;
  EXPECT_NE(types.find("response.reasoning_summary_text.done response.reasoning_summary_part.done "
                       "response.content_part.done response.output_item.done response.incomplete"),
            std::string::npos)
      << types;
  const json streamed = Accumulate(events);
  EXPECT_EQ(Comparable(streamed), Comparable(r));
}

// ---- the store alone (no model) ----

TEST(ResponseStore, KeepsTheMostRecentlyUsedWithinItsCaps) {
  api::ResponseStoreOptions o;
  o.max_responses = 3;
  api::ResponseStore store(o);
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(store.Put(id, {"me", "{}", {}, "completed", false}));
  ASSERT_TRUE(store.Get("a", "me"));  // a is now the most recent: b goes first
  ASSERT_TRUE(store.Put("d", {"me", "{}", {}, "completed", false}));
  EXPECT_FALSE(store.Get("b", "me"));
  EXPECT_TRUE(store.Get("a", "me"));
  EXPECT_TRUE(store.Get("c", "me"));
  EXPECT_TRUE(store.Get("d", "me"));
  EXPECT_FALSE(store.Get("a", "someone else"));
  EXPECT_FALSE(store.Delete("a", "someone else"));
  EXPECT_TRUE(store.Delete("a", "me"));
  EXPECT_EQ(store.stats().responses, 2u);
  // Bytes: a response larger than the whole store is not kept.
  api::ResponseStoreOptions small;
  small.max_bytes = 1000;
  api::ResponseStore tiny(small);
  EXPECT_FALSE(tiny.Put("big", {"me", std::string(2000, 'x'), {}, "completed", false}));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(tiny.Put(std::to_string(i), {"me", std::string(200, 'x'), {}, "", false}));
  EXPECT_LE(tiny.stats().bytes, 1000u);
  EXPECT_TRUE(tiny.Get("9", "me"));
  EXPECT_FALSE(tiny.Get("0", "me"));
  // Time to live.
  api::ResponseStoreOptions brief;
  brief.ttl = std::chrono::seconds(0);
  api::ResponseStore gone(brief);
  ASSERT_TRUE(gone.Put("x", {"me", "{}", {}, "completed", false}));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(gone.Get("x", "me"));
}

TEST(ResponseStore, CancelStopsABackgroundRun) {
  api::ResponseStoreOptions o;
  o.max_background = 1;
  api::ResponseStore store(o);
  ASSERT_TRUE(store.Put("r", {"me", "{}", {}, "in_progress", true}));
  std::atomic<bool> started{false};
  ASSERT_TRUE(store
                  .RunInBackground("r",
                                   [&](const std::atomic<bool>& cancelled) {
                                     started = true;
                                     while (!cancelled.load())
                                       std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                     store.Put("r", {"me", "{}", {}, "cancelled", true});
                                   })
                  .ok());
  // The cap: a second run is refused while the first goes on.
  ASSERT_TRUE(store.Put("s", {"me", "{}", {}, "queued", true}));
  EXPECT_EQ(store.RunInBackground("s", [](const std::atomic<bool>&) {}).code(), ErrorCode::kResourceExhausted);
  while (!started) std::this_thread::yield();
  EXPECT_EQ(store.Cancel("r", "someone else").code(), ErrorCode::kNotFound);
  ASSERT_TRUE(store.Cancel("r", "me", std::chrono::seconds(30)).ok());
  EXPECT_EQ(store.Get("r", "me")->status, "cancelled");
  EXPECT_EQ(store.stats().running, 0u);
  ASSERT_TRUE(store.Put("n", {"me", "{}", {}, "completed", false}));
  EXPECT_EQ(store.Cancel("n", "me").code(), ErrorCode::kInvalidArgument);
  // Shutdown cancels what still runs and waits for it.
  std::atomic<bool> ended{false};
  ASSERT_TRUE(store
                  .RunInBackground("s",
                                   [&](const std::atomic<bool>& cancelled) {
                                     while (!cancelled.load())
                                       std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                     ended = true;
                                   })
                  .ok());
  store.Shutdown();
  EXPECT_TRUE(ended);
  EXPECT_EQ(store.RunInBackground("s", [](const std::atomic<bool>&) {}).code(), ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace ropeserve
