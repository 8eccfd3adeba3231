// OpenAI's Files API (POST /v1/files multipart, GET /v1/files, GET /
// DELETE /v1/files/{id}, GET .../content) over a data directory: batch
// input files checked line by line on upload with the endpoints' own
// readers, files per API key, and the limits of the upload path.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "server/batch/file_store.h"
#include "server/storage/data_dir.h"
#include "tests/api/http_fixture.h"
#include "tests/checkpoint/test_checkpoints.h"

namespace ropeserve {
namespace {

using json = nlohmann::json;

std::string Line(const std::string& id, const std::string& url, const json& body) {
  return json{{"custom_id", id}, {"method", "POST"}, {"url", url}, {"body", body}}.dump() + "\n";
}

const std::string kGoodFile =
    Line("chat-1", "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 4}}) +
    Line("sum-1", "/v1/summarize", {{"text", "A text to summarize."}}) +
    Line("qa-1", "/v1/qa", {{"question", "Who?"}, {"context", "Ada did."}}) +
    Line("resp-1", "/v1/responses", {{"input", "Hello"}, {"max_output_tokens", 4}}) +
    Line("cmpl-1", "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 4}});

class Files : public HttpApi {
 protected:
  void SetUp() override {
    auto dir = storage::DataDir::Open(scratch_.path() + "/data");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_ = std::move(*dir);
    auto store = batch::FileStore::Open(*dir_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    ctx_.files = store_.get();
    auto keys = api::ApiKeys::Load({"key-one", "key-two"}, "");
    ASSERT_TRUE(keys.ok());
    ctx_.api_keys = std::move(*keys);
    HttpApi::SetUp();
  }
  httplib::Headers Auth(const char* key) { return {{"Authorization", std::string("Bearer ") + key}}; }
  std::pair<int, json> Upload(const std::string& content, const std::string& purpose = "batch",
                              const char* key = "key-one") {
    httplib::MultipartFormDataItems items = {{"purpose", purpose, "", ""},
                                             {"file", content, "input.jsonl", "application/jsonl"}};
    auto r = client_->Post("/v1/files", Auth(key), items);
    if (!r) return {-1, json()};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  std::pair<int, std::string> Get(const std::string& path, const char* key = "key-one") {
    auto r = client_->Get(path.c_str(), Auth(key));
    if (!r) return {-1, ""};
    return {r->status, r->body};
  }

  testing::ScratchDir scratch_;
  std::unique_ptr<storage::DataDir> dir_;
  std::unique_ptr<batch::FileStore> store_;
};

TEST_F(Files, UploadListRetrieveDownloadDelete) {
  auto [code, file] = Upload(kGoodFile);
  ASSERT_EQ(code, 200) << file.dump();
  const std::string id = file["id"];
  EXPECT_EQ(id.rfind("file-", 0), 0u);
  EXPECT_EQ(file["object"], "file");
  EXPECT_EQ(file["bytes"], kGoodFile.size());
  EXPECT_EQ(file["filename"], "input.jsonl");
  EXPECT_EQ(file["purpose"], "batch");
  EXPECT_EQ(file["status"], "processed");
  EXPECT_TRUE(file["expires_at"].is_null());

  auto [lc, list] = Get("/v1/files?purpose=batch");
  ASSERT_EQ(lc, 200) << list;
  const json l = json::parse(list);
  ASSERT_EQ(l["data"].size(), 1u);
  EXPECT_EQ(l["data"][0], file);
  EXPECT_EQ(l["first_id"], id);
  EXPECT_EQ(l["has_more"], false);
  auto [gc, got] = Get("/v1/files/" + id);
  ASSERT_EQ(gc, 200);
  EXPECT_EQ(json::parse(got), file);
  auto [cc, content] = Get("/v1/files/" + id + "/content");
  ASSERT_EQ(cc, 200);
  EXPECT_EQ(content, kGoodFile);

  // Another key sees none of it.
  EXPECT_EQ(Get("/v1/files/" + id, "key-two").first, 404);
  EXPECT_EQ(Get("/v1/files/" + id + "/content", "key-two").first, 404);
  EXPECT_EQ(json::parse(Get("/v1/files", "key-two").second)["data"].size(), 0u);
  EXPECT_EQ(client_->Delete(("/v1/files/" + id).c_str(), Auth("key-two"))->status, 404);

  auto deleted = client_->Delete(("/v1/files/" + id).c_str(), Auth("key-one"));
  ASSERT_EQ(deleted->status, 200);
  EXPECT_EQ(json::parse(deleted->body), json({{"id", id}, {"object", "file"}, {"deleted", true}}));
  EXPECT_EQ(Get("/v1/files/" + id).first, 404);
}

TEST_F(Files, BadBatchFilesAreRefusedNamingTheirLines) {
  const std::string bad =
      Line("a", "/v1/chat/completions", {{"messages", json::array()}}) +  // 1: empty messages
      Line("b", "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"stream", true}}) +
      Line("c", "/v1/summarize", {{"text", "x"}, {"frobnicate", 1}}) +               // 3: unknown field
      Line("d", "/v1/responses", {{"input", "x"}, {"max_output_tokens", "four"}}) +  // 4: type
      Line("d", "/v1/qa", {{"question", "q"}, {"context", "c"}}) +                   // 5: duplicate id
      Line("e", "/v1/embeddings", {{"input", "x"}});                                 // 6: endpoint
  auto [code, error] = Upload(bad);
  ASSERT_EQ(code, 400) << error.dump();
  EXPECT_EQ(error["error"]["param"], "file");
  const std::string m = error["error"]["message"];
  EXPECT_NE(m.find("6 bad lines"), std::string::npos) << m;
  EXPECT_NE(m.find("line 1: body.messages"), std::string::npos) << m;
  EXPECT_NE(m.find("line 2: body.stream"), std::string::npos) << m;
  EXPECT_NE(m.find("line 3: body.frobnicate"), std::string::npos) << m;
  EXPECT_NE(m.find("line 4: body.max_output_tokens"), std::string::npos) << m;
  EXPECT_NE(m.find("line 5: custom_id 'd' is already used by line 4"), std::string::npos) << m;
  EXPECT_NE(m.find("line 6: 'url'"), std::string::npos) << m;
  EXPECT_EQ(json::parse(Get("/v1/files").second)["data"].size(), 0u) << "a refused file was kept";

  EXPECT_EQ(Upload(kGoodFile, "assistants").second["error"]["param"], "purpose");
  // Not multipart, no file, unknown fields.
  auto json_body = client_->Post("/v1/files", Auth("key-one"), "{}", "application/json");
  EXPECT_EQ(json_body->status, 400);
  httplib::MultipartFormDataItems no_file = {{"purpose", "batch", "", ""}};
  EXPECT_EQ(json::parse(client_->Post("/v1/files", Auth("key-one"), no_file)->body)["error"]["param"], "file");
  httplib::MultipartFormDataItems extra = {
      {"purpose", "batch", "", ""}, {"file", kGoodFile, "f.jsonl", ""}, {"colour", "red", "", ""}};
  EXPECT_EQ(json::parse(client_->Post("/v1/files", Auth("key-one"), extra)->body)["error"]["param"], "colour");
  for (const char* bad_query : {"?limit=0", "?order=sideways", "?after=file-nope", "?page=2"})
    EXPECT_EQ(Get(std::string("/v1/files") + bad_query).first, 400) << bad_query;
}

TEST_F(Files, ExpiryIsKeptWithinOpenAIsBounds) {
  httplib::MultipartFormDataItems items = {{"purpose", "batch", "", ""},
                                           {"file", kGoodFile, "f.jsonl", ""},
                                           {"expires_after[anchor]", "created_at", "", ""},
                                           {"expires_after[seconds]", "3600", "", ""}};
  auto r = client_->Post("/v1/files", Auth("key-one"), items);
  ASSERT_EQ(r->status, 200) << r->body;
  const json f = json::parse(r->body);
  EXPECT_EQ(f["expires_at"], f["created_at"].get<std::int64_t>() + 3600);
  items[3].content = "60";
  r = client_->Post("/v1/files", Auth("key-one"), items);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "expires_after[seconds]");
}

// Without a data directory the Files API says what is missing.
TEST_F(HttpApi, FilesNeedADataDirectory) {
  auto r = client_->Get("/v1/files");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("--data-dir"), std::string::npos) << r->body;
}

}  // namespace
}  // namespace ropeserve
