// Unit tests of the serving pieces that need no model: lifecycle, API keys,
// metrics rendering, JSON log lines, the HTTP connection layer.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <thread>
#include <vector>

#include "server/api/api_keys.h"
#include "server/api/http/http_connection.h"
#include "server/api/lifecycle.h"
#include "server/api/observability/metrics.h"
#include "tests/checkpoint/test_checkpoints.h"

namespace ropeserve::api {
namespace {

// Every accepted connection is served while the others are still open: a
// round of n clients whose handlers each wait for all n must complete, for
// n growing past the threads left idle by the round before (a connection
// once waited for another to end when two arrived while one thread was
// idle).
// (The race is timing-dependent: ten fresh servers make a miss unlikely.)
void ServeRoundsOfConcurrentClients() {
  ConnectionLimits limits;
  auto server = MakeGuardedServer(limits, "", "");
  ASSERT_TRUE(server && server->is_valid());
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0, round_size = 0;
  server->Get("/latch", [&](const httplib::Request&, httplib::Response& res) {
    std::unique_lock<std::mutex> lock(mu);
    ++arrived;
    cv.notify_all();
    const bool all = cv.wait_for(lock, std::chrono::seconds(10), [&] { return arrived >= round_size; });
    res.status = all ? 200 : 504;
  });
  const int port = server->bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serve([&] { server->listen_after_bind(); });
  for (int n = 1; n <= 12; ++n) {
    {
      std::lock_guard<std::mutex> lock(mu);
      arrived = 0;
      round_size = n;
    }
    std::vector<int> status(n, -1);
    std::vector<std::thread> clients;
    for (int i = 0; i < n; ++i) {
      clients.emplace_back([&, i] {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(20, 0);
        if (auto r = c.Get("/latch")) status[i] = r->status;
      });
    }
    for (auto& t : clients) t.join();
    for (int i = 0; i < n; ++i) EXPECT_EQ(status[i], 200) << "round of " << n << ", client " << i;
  }
  server->stop();
  serve.join();
}

TEST(ConnectionLayer, ConcurrentConnectionsAreServedAtOnce) {
  for (int pass = 0; pass < 10 && !HasFailure(); ++pass) ServeRoundsOfConcurrentClients();
}

TEST(Lifecycle, AdmitsOnlyWhileReadyAndDrainWaitsForTickets) {
  Lifecycle l;
  EXPECT_EQ(l.Admit().status().code(), ErrorCode::kUnavailable);  // loading
  l.SetReady();
  auto a = l.Admit();
  auto b = l.Admit();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(l.in_flight(), 2);
  l.StartDraining();
  EXPECT_FALSE(l.ready());
  EXPECT_EQ(l.Admit().status().code(), ErrorCode::kUnavailable);
  EXPECT_FALSE(l.WaitIdle(std::chrono::milliseconds(10)));
  { Lifecycle::Ticket gone = std::move(*a); }  // released by the move target
  EXPECT_EQ(l.in_flight(), 1);
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    Lifecycle::Ticket last = std::move(*b);
  });
  EXPECT_TRUE(l.WaitIdle(std::chrono::seconds(10)));
  t.join();
  EXPECT_EQ(l.in_flight(), 0);
  l.SetReady();  // no way back from draining
  EXPECT_FALSE(l.ready());
}

TEST(ApiKeys, BearerKeysFromFlagsAndFile) {
  ApiKeys none;
  EXPECT_TRUE(none.Check("").ok());
  testing::ScratchDir dir;
  const std::string file = dir.path() + "/keys";
  std::ofstream(file) << "# comment\n\n  second-key  \r\n";
  auto k = ApiKeys::Load({"first"}, file);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_TRUE(k->Check("Bearer first").ok());
  EXPECT_TRUE(k->Check("Bearer second-key").ok());
  for (const char* bad :
       {"", "first", "Bearer", "Bearer ", "Bearer firs", "Bearer first ", "bearer first", "Basic first"}) {
    EXPECT_EQ(k->Check(bad).code(), ErrorCode::kUnauthenticated) << bad;
  }
  EXPECT_FALSE(ApiKeys::Load({""}, "").ok());
  EXPECT_FALSE(ApiKeys::Load({"has space"}, "").ok());
  EXPECT_FALSE(ApiKeys::Load({}, dir.path() + "/missing").ok());
  std::ofstream(dir.path() + "/empty") << "# nothing\n";
  EXPECT_FALSE(ApiKeys::Load({}, dir.path() + "/empty").ok());
}

TEST(ServerMetrics, RendersObservationsInTextFormat) {
  ServerMetrics m;
  RequestMetrics r;
  r.queue_seconds = 0.01;
  r.ttft_seconds = 0.05;
  r.e2e_seconds = 1.5;
  r.inter_token_seconds = {0.02, 0.03};
  r.prompt_tokens = 12;
  r.generated_tokens = 3;
  m.OnRequestFinished(r);  // before SetModel: dropped
  ServedModelInfo info;
  info.name = "m1";
  info.qa_name = "qa1";
  info.block_size = 16;
  info.num_blocks = 100;
  info.max_model_len = 4096;
  m.SetModel(info);
  m.OnRequestFinished(r);
  r.finish_reason = FinishReason::kCancelled;
  m.OnRequestFinished(r);
  StepMetrics s;
  s.scheduled_tokens = 40;
  m.OnStep(s);
  m.AddQaModel("qa2");  // exported before its first answer
  m.ObserveQaLatency("qa1", 0.2);
  m.CountRequest("/v1/summarize", "http", "200");
  m.CountRequest("/v1/summarize", "http", "200");
  m.CountRequest("Summarize", "grpc", "UNAVAILABLE");
  const std::string text = m.Render();
  auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
  // Each engine metric under ropeserve_ and vLLM's exact name, labelled with the model.
  for (const std::string p : {"ropeserve_", "vllm:"}) {
    EXPECT_TRUE(has(p + "prompt_tokens_total{model_name=\"m1\"} 24")) << p << text;
    EXPECT_TRUE(has(p + "inter_token_latency_seconds_count{model_name=\"m1\"} 4")) << p;
    EXPECT_TRUE(has(p + "time_to_first_token_seconds_bucket{model_name=\"m1\",le=\"0.06\"} 2")) << p;
    EXPECT_TRUE(has(p + "time_to_first_token_seconds_bucket{model_name=\"m1\",le=\"0.04\"} 0")) << p;
    EXPECT_TRUE(has(p + "request_prefill_time_seconds_sum{model_name=\"m1\"} 0.08")) << p;
    EXPECT_TRUE(has(p + "request_decode_time_seconds_sum{model_name=\"m1\"} 2.9")) << p;
    // vLLM's 1-2-5 token buckets up to max_model_len.
    EXPECT_TRUE(has(p + "request_generation_tokens_bucket{model_name=\"m1\",le=\"2000\"} 2")) << p;
    EXPECT_EQ(text.find(p + "request_generation_tokens_bucket{model_name=\"m1\",le=\"5000\"}"), std::string::npos);
    EXPECT_TRUE(has(p + "cache_config_info{block_size=\"16\",model_name=\"m1\",num_gpu_blocks=\"100\"} 1")) << p;
    // No engine attached: the gauges exist and read 0.
    EXPECT_TRUE(has(p + "kv_cache_usage_perc{model_name=\"m1\"} 0")) << p;
  }
  EXPECT_TRUE(has("ropeserve_iteration_tokens_sum{model_name=\"m1\"} 40"));
  EXPECT_TRUE(has("vllm:iteration_tokens_total_sum{model_name=\"m1\"} 40"));
  // Finish reasons: ours, and vLLM's coarser ones.
  EXPECT_TRUE(has("ropeserve_request_success_total{model_name=\"m1\",finished_reason=\"cancelled\"} 1")) << text;
  EXPECT_TRUE(has("vllm:request_success_total{model_name=\"m1\",finished_reason=\"abort\"} 1"));
  EXPECT_TRUE(has("vllm:request_success_total{model_name=\"m1\",finished_reason=\"stop\"} 1"));
  EXPECT_TRUE(has("ropeserve_qa_request_latency_seconds_count{model_name=\"qa1\"} 1"));
  EXPECT_TRUE(has("ropeserve_qa_request_latency_seconds_count{model_name=\"qa2\"} 0"));
  EXPECT_TRUE(has("ropeserve_requests_total{code=\"200\",endpoint=\"/v1/summarize\",protocol=\"http\"} 2"));
  EXPECT_NE(text.find("protocol=\"grpc\"} 1"), std::string::npos);
  EXPECT_NE(text.find("ropeserve_build_info{compiler="), std::string::npos);
  for (const char* name : {"process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds ",
                           "process_max_fds ", "process_start_time_seconds ", "process_virtual_memory_bytes "})
    EXPECT_NE(text.find(std::string("\n") + name), std::string::npos) << name;
  // A second SetModel changes nothing (the families exist once).
  info.name = "other";
  m.SetModel(info);
  EXPECT_EQ(m.Render().find("model_name=\"other\""), std::string::npos);
}

TEST(ServerMetrics, MapsFinishReasonsToVllms) {
  EXPECT_STREQ(VllmFinishedReason(FinishReason::kStop), "stop");
  EXPECT_STREQ(VllmFinishedReason(FinishReason::kLength), "length");
  EXPECT_STREQ(VllmFinishedReason(FinishReason::kDeadline), "abort");
  EXPECT_STREQ(VllmFinishedReason(FinishReason::kRejected), "abort");
  EXPECT_STREQ(VllmFinishedReason(FinishReason::kError), "error");
}

}  // namespace
}  // namespace ropeserve::api
