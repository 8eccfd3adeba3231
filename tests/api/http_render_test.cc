// vLLM's render endpoints (POST /v1/completions/render and
// /v1/chat/completions/render): the token ids are the ones the generation
// endpoint runs (checked against its prompt_token_ids and against the
// tokenizer), the sampling params are the validated ones, a body the
// endpoint refuses is refused with its error, and the admin port serves
// them without an API key while the API port asks for one.
#include <gtest/gtest.h>

#include "server/api/api_keys.h"
#include "server/tokenizer/tokenizer.h"
#include "tests/api/http_fixture.h"

namespace ropeserve {
namespace {

using json = nlohmann::json;

class Render : public HttpApi {
 protected:
  void SetUp() override {
    auto keys = api::ApiKeys::Load({"key-one"}, "");
    ASSERT_TRUE(keys.ok());
    ctx_.api_keys = std::move(*keys);
    HttpApi::SetUp();
    if (HasFatalFailure()) return;
    api::HttpServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.admin = true;
    o.max_body_bytes = 4096;
    admin_ = std::make_unique<api::HttpServer>(o, ctx_);
    admin_thread_ = std::thread([this] { admin_status_ = admin_->Serve(); });
    for (int i = 0; i < 500 && !admin_->listening(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(admin_->listening());
    admin_client_ = std::make_unique<httplib::Client>("127.0.0.1", admin_->port());
  }
  void TearDown() override {
    if (admin_ != nullptr) {
      admin_->Stop();
      admin_thread_.join();
      EXPECT_TRUE(admin_status_.ok()) << admin_status_.ToString();
    }
    HttpApi::TearDown();
  }
  // On the API port, with the key.
  std::pair<int, json> Call(const std::string& path, const json& body) {
    auto r = client_->Post(path, {{"Authorization", "Bearer key-one"}}, body.dump(), "application/json");
    if (!r) return {-1, json()};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  // On the admin port, without a key.
  std::pair<int, json> Admin(const std::string& path, const json& body) {
    auto r = admin_client_->Post(path, body.dump(), "application/json");
    if (!r) return {-1, json()};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  std::vector<std::int64_t> Ids(const std::string& text, bool add_special) {
    auto e = tokenizer_->Encode(text, add_special);
    EXPECT_TRUE(e.ok());
    return std::vector<std::int64_t>(e->ids.begin(), e->ids.end());
  }

  std::unique_ptr<api::HttpServer> admin_;
  std::unique_ptr<httplib::Client> admin_client_;
  std::thread admin_thread_;
  Status admin_status_;
};

// Each token's offsets lie in the text, in order, and cover it.
void ExpectOffsetsCover(const json& offsets, std::size_t ids, std::size_t code_points) {
  ASSERT_TRUE(offsets.is_array()) << offsets.dump();
  ASSERT_EQ(offsets.size(), ids);
  std::size_t last_end = 0;
  for (const json& o : offsets) {
    const auto start = o[0].get<std::size_t>(), end = o[1].get<std::size_t>();
    EXPECT_LE(start, end);
    EXPECT_LE(end, code_points);
    EXPECT_GE(start, last_end > 0 ? last_end - 1 : 0);  // byte-level tokens of one character may share it
    last_end = std::max(last_end, end);
  }
  EXPECT_EQ(last_end, code_points);
}

TEST_F(Render, CompletionRenderGivesTheIdsAndParamsCompletionsRuns) {
  const std::string text = "Hello world, how are you?";
  const json body = {{"prompt", json::array({text, json::array({5, 6, 7})})},
                     {"max_tokens", 4},
                     {"temperature", 0.5},
                     {"top_k", 7},
                     {"seed", 11},
                     {"stop", "zz"},
                     {"logprobs", 2},
                     {"ignore_eos", true}};
  auto [code, rendered] = Call("/v1/completions/render", body);
  ASSERT_EQ(code, 200) << rendered.dump();
  ASSERT_TRUE(rendered.is_array());
  ASSERT_EQ(rendered.size(), 2u);
  EXPECT_EQ(rendered[0]["token_ids"].get<std::vector<std::int64_t>>(), Ids(text, true));
  EXPECT_EQ(rendered[1]["token_ids"], json::array({5, 6, 7}));
  // The ids the generation endpoint reports it ran.
  json run_body = body;
  run_body["return_token_ids"] = true;
  auto [run_code, run] = Call("/v1/completions", run_body);
  ASSERT_EQ(run_code, 200) << run.dump();
  EXPECT_EQ(run["choices"][0]["prompt_token_ids"], rendered[0]["token_ids"]);
  EXPECT_EQ(run["choices"][1]["prompt_token_ids"], rendered[1]["token_ids"]);
  for (const json& r : rendered) {
    EXPECT_EQ(r["model"], "tiny");
    EXPECT_EQ(r["request_id"].get<std::string>().rfind("cmpl-", 0), 0u) << r.dump();
    EXPECT_TRUE(r["token_offsets"].is_null());
    EXPECT_TRUE(r["features"].is_null());
    EXPECT_EQ(r["stream"], false);
    EXPECT_EQ(r["priority"], 0);
    const json& sp = r["sampling_params"];
    EXPECT_EQ(sp["max_tokens"], 4);
    EXPECT_EQ(sp["temperature"], 0.5);
    EXPECT_EQ(sp["top_k"], 7);
    EXPECT_EQ(sp["top_p"], 1.0);
    EXPECT_EQ(sp["seed"], 11);
    EXPECT_EQ(sp["stop"], json::array({"zz"}));
    EXPECT_EQ(sp["logprobs"], 2);
    EXPECT_EQ(sp["ignore_eos"], true);
    EXPECT_EQ(sp["n"], 1);
  }
  EXPECT_NE(rendered[0]["request_id"], rendered[1]["request_id"]);

  // Offsets on request: the text prompt's, none for the ids.
  auto [oc, with_offsets] = Call(
      "/v1/completions/render",
      {{"prompt", json::array({text, json::array({5})})}, {"return_token_offsets", true}, {"request_id", "req-7"}});
  ASSERT_EQ(oc, 200) << with_offsets.dump();
  ExpectOffsetsCover(with_offsets[0]["token_offsets"], Ids(text, true).size(), text.size());
  EXPECT_TRUE(with_offsets[1]["token_offsets"].is_null());
  EXPECT_EQ(with_offsets[0]["request_id"], "req-7-0");
  EXPECT_EQ(with_offsets[1]["request_id"], "req-7-1");
}

TEST_F(Render, ChatRenderGivesTheIdsChatCompletionsRuns) {
  const json messages =
      json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi there"}}});
  auto [code, rendered] = Call("/v1/chat/completions/render", {{"messages", messages},
                                                               {"max_tokens", 3},
                                                               {"stream", true},
                                                               {"stream_options", {{"include_usage", true}}},
                                                               {"return_token_offsets", true},
                                                               {"request_id", "chat-1"}});
  ASSERT_EQ(code, 200) << rendered.dump();
  ASSERT_TRUE(rendered.is_object());
  auto template_text = service_->ApplyChatTemplate(nlohmann::ordered_json::parse(messages.dump()), true,
                                                   nlohmann::ordered_json::object());
  ASSERT_TRUE(template_text.ok());
  const std::vector<std::int64_t> want = Ids(*template_text, false);
  EXPECT_EQ(rendered["token_ids"].get<std::vector<std::int64_t>>(), want);
  auto [run_code, run] =
      Call("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 3}, {"return_token_ids", true}});
  ASSERT_EQ(run_code, 200) << run.dump();
  EXPECT_EQ(run["prompt_token_ids"], rendered["token_ids"]);
  EXPECT_EQ(rendered["request_id"], "chat-1");
  EXPECT_EQ(rendered["stream"], true);
  EXPECT_EQ(rendered["stream_options"]["include_usage"], true);
  EXPECT_EQ(rendered["sampling_params"]["max_tokens"], 3);
  EXPECT_TRUE(rendered["sampling_params"]["logprobs"].is_null());
  // The template's text is ASCII here: code points = bytes.
  ExpectOffsetsCover(rendered["token_offsets"], want.size(), template_text->size());

  // Without an id: a chat completion's.
  auto [c2, plain] = Call("/v1/chat/completions/render", {{"messages", messages}});
  ASSERT_EQ(c2, 200) << plain.dump();
  EXPECT_EQ(plain["request_id"].get<std::string>().rfind("chatcmpl-", 0), 0u) << plain.dump();
  EXPECT_TRUE(plain["token_offsets"].is_null());
}

// What the generation endpoint refuses, render refuses with the same
// status and param; render's own fields are checked.
TEST_F(Render, RefusesWhatGenerationRefuses) {
  const std::vector<std::pair<std::string, json>> bad = {
      {"/v1/completions", {{"prompt", "x"}, {"suffix", "y"}}},
      {"/v1/completions", {{"prompt", "x"}, {"temperature", -1}}},
      {"/v1/completions", {{"prompt", "x"}, {"model", "other"}}},
      {"/v1/completions", {{"prompt", json::array({json::array({999999})})}}},
      {"/v1/completions", {{"prompt", "x"}, {"max_tokens", 1000000}}},
      {"/v1/chat/completions", {{"messages", json::array()}}},
      {"/v1/chat/completions", {{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}, {"unknown", 1}}},
  };
  for (const auto& [path, body] : bad) {
    auto [gen_code, gen] = Call(path, body);
    auto [code, out] = Call(path + "/render", body);
    EXPECT_GE(code, 400) << path << " " << body.dump();
    EXPECT_EQ(code, gen_code) << path << " " << body.dump() << " " << out.dump();
    EXPECT_EQ(out["error"]["param"], gen["error"]["param"]) << out.dump() << " vs " << gen.dump();
  }
  for (const json& id : {json("has space"), json(std::string(257, 'a')), json(5)}) {
    auto [code, out] = Call("/v1/completions/render", {{"prompt", "x"}, {"request_id", id}});
    EXPECT_EQ(code, 400) << out.dump();
    EXPECT_EQ(out["error"]["param"], "request_id");
  }
  auto [code, out] = Call("/v1/completions/render", {{"prompt", "x"}, {"return_token_offsets", "yes"}});
  EXPECT_EQ(code, 400) << out.dump();
  EXPECT_EQ(out["error"]["param"], "return_token_offsets");
  // Render's fields are render's: the generation endpoint does not take them.
  EXPECT_EQ(Call("/v1/completions", {{"prompt", "x"}, {"return_token_offsets", true}}).first, 400);
}

// The API port asks for the key; the admin port (llm-d's router calls it
// from inside the cluster, with no key) does not, and serves the same.
TEST_F(Render, AdminPortServesRenderWithoutAKey) {
  const json body = {{"prompt", "Hello world"}};
  auto r = client_->Post("/v1/completions/render", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  auto [api_code, api] = Call("/v1/completions/render", body);
  auto [admin_code, admin] = Admin("/v1/completions/render", body);
  ASSERT_EQ(api_code, 200) << api.dump();
  ASSERT_EQ(admin_code, 200) << admin.dump();
  EXPECT_EQ(admin[0]["token_ids"], api[0]["token_ids"]);
  auto [chat_code, chat] =
      Admin("/v1/chat/completions/render", {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}});
  EXPECT_EQ(chat_code, 200) << chat.dump();
  // Nothing else of the API is on the admin port.
  EXPECT_EQ(Admin("/v1/completions", body).first, 404);
  EXPECT_EQ(Admin("/tokenize", body).first, 404);
}

}  // namespace
}  // namespace ropeserve
