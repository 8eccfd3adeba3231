// The REST API over a tiny generated qwen2 model: a fixture shared by the
// HTTP black-box tests (http_test.cc, http_sampling_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/api/http/http_server.h"
#include "server/api/rest/rest_handlers.h"
#include "tests/api/tiny_service_test.h"

namespace ropeserve {

// POSTs `body` (with `headers`) and reads the streamed answer with
// cpp-httplib; "" unless it is a 200.
inline std::string StreamBody(int port, const std::string& path, const std::string& body,
                              const httplib::Headers& headers = {}) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.headers = headers;
  req.set_header("Content-Type", "application/json");
  std::string raw;
  req.content_receiver = [&](const char* d, size_t n, std::uint64_t, std::uint64_t) {
    raw.append(d, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  if (!c.send(req, res, err) || res.status != 200) return "";
  return raw;
}

// Reads an SSE answer; returns the data payloads.
inline std::vector<std::string> StreamEvents(int port, const std::string& path, const std::string& body) {
  const std::string raw = StreamBody(port, path, body);
  std::vector<std::string> events;
  for (size_t pos = 0, end; (end = raw.find("\n\n", pos)) != std::string::npos; pos = end + 2) {
    const std::string e = raw.substr(pos, end - pos);
    if (e.rfind("data: ", 0) == 0) events.push_back(e.substr(6));
  }
  return events;
}

class HttpApi : public TinyServiceTest {
 protected:
  void SetUp() override {
    StartService("qwen2");
    if (HasFatalFailure()) return;
    api::HttpServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.max_body_bytes = 4096;
    server_ = std::make_unique<api::HttpServer>(o, ctx_);
    thread_ = std::thread([this] { serve_status_ = server_->Serve(); });
    for (int i = 0; i < 500 && !server_->listening(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(server_->listening());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
  }
  void TearDown() override {
    if (server_ == nullptr) return;
    server_->Stop();
    thread_.join();
    EXPECT_TRUE(serve_status_.ok()) << serve_status_.ToString();
  }
  // Posts `body`, asking for token ids in the answer (return_token_ids)
  // when the body is a JSON object that does not say.
  std::pair<int, nlohmann::json> Post(std::string body, const char* path = "/v1/completions") {
    nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_object() && !j.contains("return_token_ids")) {
      j["return_token_ids"] = true;
      body = j.dump();
    }
    return PostRaw(body, path);
  }
  std::pair<int, nlohmann::json> PostRaw(const std::string& body, const char* path = "/v1/completions") {
    auto r = client_->Post(path, body, "application/json");
    if (!r) return {-1, nlohmann::json()};
    return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
  }

  std::unique_ptr<api::HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::thread thread_;
  Status serve_status_;
};

}  // namespace ropeserve
