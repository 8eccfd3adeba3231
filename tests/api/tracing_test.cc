// Tracing without a model: the OTLP/JSON encoding, the spans built from an
// engine request's timings, and the exporter against a local collector
// (one that answers, one that stalls).
#include "server/api/observability/tracing.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <condition_variable>
#include <mutex>
#include <thread>

namespace ropeserve::api {
namespace {

using json = nlohmann::json;

SpanRecord Span(const std::string& name) {
  SpanRecord s;
  s.context = *TraceContext::Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  s.parent_id = TraceContext::Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01")->span_id;
  s.name = name;
  s.kind = SpanKind::kServer;
  s.start_unix_nanos = 1700000000000000000;
  s.end_unix_nanos = 1700000000500000000;
  s.attributes = {{"s", std::string("v")}, {"i", std::int64_t{1} << 40}, {"d", 0.5}, {"b", true}};
  return s;
}

TEST(OtlpJson, EncodesSpansAsTheOtlpJsonMappingAsks) {
  SpanRecord failed = Span("b");
  failed.error = true;
  failed.status_message = "boom";
  failed.parent_id = {};
  const json j = json::parse(OtlpTracesJson({Span("a"), failed}, "svc"));
  const json& rs = j.at("resourceSpans").at(0);
  EXPECT_EQ(rs.at("resource").at("attributes").at(0),
            (json{{"key", "service.name"}, {"value", {{"stringValue", "svc"}}}}));
  const json& spans = rs.at("scopeSpans").at(0).at("spans");
  ASSERT_EQ(spans.size(), 2u);
  const json& a = spans[0];
  // Ids are hex (not base64 as in OTLP/protobuf-JSON of other signals);
  // 64-bit integers are strings.
  EXPECT_EQ(a.at("traceId"), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(a.at("spanId"), "00f067aa0ba902b7");
  EXPECT_EQ(a.at("parentSpanId"), "1111111111111111");
  EXPECT_EQ(a.at("kind"), 2);
  EXPECT_EQ(a.at("startTimeUnixNano"), "1700000000000000000");
  EXPECT_EQ(a.at("endTimeUnixNano"), "1700000000500000000");
  EXPECT_EQ(a.at("attributes").at(1), (json{{"key", "i"}, {"value", {{"intValue", "1099511627776"}}}}));
  EXPECT_EQ(a.at("attributes").at(2).at("value").at("doubleValue"), 0.5);
  EXPECT_EQ(a.at("attributes").at(3).at("value").at("boolValue"), true);
  EXPECT_FALSE(a.contains("status"));
  EXPECT_FALSE(spans[1].contains("parentSpanId"));  // a root span
  EXPECT_EQ(spans[1].at("status"), (json{{"code", 2}, {"message", "boom"}}));
}

TEST(EngineRequestSpans, PlaceQueuePrefillAndDecodeFromTheTimings) {
  RequestMetrics m;
  m.trace = TraceContext::NewRoot();
  m.queue_seconds = 0.25;
  m.ttft_seconds = 1.0;
  m.e2e_seconds = 3.0;
  m.prompt_tokens = 7;
  m.generated_tokens = 5;
  const auto end = std::chrono::system_clock::time_point(std::chrono::seconds(2000000000));
  const auto spans = EngineRequestSpans(m, end);
  ASSERT_EQ(spans.size(), 4u);
  const std::int64_t e = 2000000000LL * 1000000000LL, s = 1000000000;
  EXPECT_EQ(spans[0].name, "generate");
  EXPECT_EQ(spans[0].parent_id, m.trace.span_id);
  EXPECT_EQ(spans[0].context.trace_id, m.trace.trace_id);
  EXPECT_EQ(spans[0].start_unix_nanos, e - 3 * s);
  EXPECT_EQ(spans[0].end_unix_nanos, e);
  const char* names[] = {"queue", "prefill", "decode"};
  const std::int64_t bounds[] = {e - 3 * s, e - 3 * s + s / 4, e - 2 * s, e};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(spans[i + 1].name, names[i]);
    EXPECT_EQ(spans[i + 1].parent_id, spans[0].context.span_id);
    EXPECT_EQ(spans[i + 1].start_unix_nanos, bounds[i]) << names[i];
    EXPECT_EQ(spans[i + 1].end_unix_nanos, bounds[i + 1]) << names[i];
  }
  // No token (cancelled while queued): the queue span only.
  m.ttft_seconds = -1;
  m.queue_seconds = 3.0;
  EXPECT_EQ(EngineRequestSpans(m, end).size(), 2u);
}

// A collector on a free local port that records the spans it receives and,
// while `stall` is set, holds every request until it is cleared.
struct Collector {
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool stall = false;
  std::vector<json> spans;

  Collector() {
    server.Post("/v1/traces", [this](const httplib::Request& req, httplib::Response& res) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !stall; });
      const json body = json::parse(req.body);
      for (const json& s : body["resourceSpans"][0]["scopeSpans"][0]["spans"]) spans.push_back(s);
      cv.notify_all();
      res.set_content("{}", "application/json");
    });
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
  }
  ~Collector() {
    Release();
    server.stop();
    thread.join();
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu);
    stall = false;
    cv.notify_all();
  }
  std::size_t WaitFor(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return spans.size() >= n; });
    return spans.size();
  }
};

TEST(OtlpExporter, DeliversSpansInBatches) {
  Collector collector;
  OtlpExporterOptions o;
  o.endpoint = "http://127.0.0.1:" + std::to_string(collector.port);  // no path: /v1/traces
  o.max_batch_spans = 4;
  o.flush_interval = std::chrono::milliseconds(50);
  auto exporter = OtlpExporter::Start(o);
  ASSERT_TRUE(exporter.ok()) << exporter.status().ToString();
  for (int i = 0; i < 10; ++i) (*exporter)->Export(Span("s" + std::to_string(i)));
  EXPECT_EQ(collector.WaitFor(10), 10u) << "dropped " << (*exporter)->dropped();
  exporter->reset();  // joins the sender
  std::lock_guard<std::mutex> lock(collector.mu);
  EXPECT_EQ(collector.spans.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(collector.spans[i]["name"], "s" + std::to_string(i));
}

TEST(OtlpExporter, DropsAndCountsRatherThanWaitForAStalledCollector) {
  Collector collector;
  collector.stall = true;
  OtlpExporterOptions o;
  o.endpoint = "http://127.0.0.1:" + std::to_string(collector.port) + "/v1/traces";
  o.max_queue_spans = 8;
  o.max_batch_spans = 4;
  o.flush_interval = std::chrono::milliseconds(10);
  o.timeout = std::chrono::milliseconds(30000);
  auto started = OtlpExporter::Start(o);
  ASSERT_TRUE(started.ok());
  std::unique_ptr<OtlpExporter> exporter = std::move(*started);
  // The sender holds at most one batch (stuck in its POST) and the queue 8:
  // of 100 spans, at least 88 are dropped at once, none waited for.
  for (int i = 0; i < 100; ++i) exporter->Export(Span("x"));
  EXPECT_GE(exporter->dropped(), 88u);
  EXPECT_EQ(exporter->exported(), 0u);
  collector.Release();
  exporter.reset();  // sends one batch more at shutdown at most, drops the rest
  std::lock_guard<std::mutex> lock(collector.mu);
  EXPECT_GE(collector.spans.size(), 4u);
  EXPECT_LE(collector.spans.size(), 12u);
}

TEST(OtlpExporter, RefusesEndpointsThatAreNotHttpUrls) {
  for (const char* bad : {"", "collector:4318", "ftp://x/v1/traces", "http://", "http://a b/", "http://h:99999/x",
                          "http://h:0/", "http://h/v1/traces?x=1"}) {
    OtlpExporterOptions o;
    o.endpoint = bad;
    EXPECT_FALSE(OtlpExporter::Start(o).ok()) << bad;
  }
  OtlpExporterOptions o;
  o.endpoint = "https://[::1]:4318/custom/path";
  EXPECT_TRUE(OtlpExporter::Start(o).ok());
}

TEST(ServerSpan, ContinuesTheClientsTraceOrStartsOne) {
  ServerSpan s = ServerSpan::Open("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EXPECT_EQ(s.context.TraceIdHex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(HexBytes(s.parent_id.data(), 8), "00f067aa0ba902b7");
  EXPECT_NE(s.context.SpanIdHex(), "00f067aa0ba902b7");
  EXPECT_EQ(s.TraceResponse().substr(0, 36), "00-4bf92f3577b34da6a3ce929d0e0e4736-");
  ServerSpan fresh = ServerSpan::Open("garbage");
  EXPECT_TRUE(fresh.context.valid());
  EXPECT_EQ(HexBytes(fresh.parent_id.data(), 8), "0000000000000000");
}

TEST(OtlpHeaders, ParsesTheOtelEnvironmentFormat) {
  auto h = ParseOtlpHeaders(" api-key = s3cr%3Dt , x-tenant=a%2Cb,,Authorization=Basic%20dXNlcg== ");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  const std::vector<std::pair<std::string, std::string>> want = {
      {"api-key", "s3cr=t"}, {"x-tenant", "a,b"}, {"Authorization", "Basic dXNlcg=="}};
  EXPECT_EQ(*h, want);
  EXPECT_TRUE(ParseOtlpHeaders("")->empty());
  EXPECT_EQ((*ParseOtlpHeaders("k=100%"))[0].second, "100%");  // not an escape: kept
  for (const char* bad : {"novalue", "=v", "bad key=v", "k=a%0D%0AInjected: 1", "k=\x01"})
    EXPECT_FALSE(ParseOtlpHeaders(bad).ok()) << bad;
}

TEST(OtlpExporter, SendsTheConfiguredHeaders) {
  httplib::Server server;
  std::mutex mu;
  std::string seen;
  server.Post("/v1/traces", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    seen = req.get_header_value("api-key");
    res.set_content("{}", "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread thread([&] { server.listen_after_bind(); });
  {
    OtlpExporterOptions o;
    o.endpoint = "http://127.0.0.1:" + std::to_string(port);
    o.headers = {{"api-key", "k1"}};
    auto exporter = OtlpExporter::Start(o);
    ASSERT_TRUE(exporter.ok());
    (*exporter)->Export(Span("s"));
  }  // the destructor sends what is queued
  server.stop();
  thread.join();
  EXPECT_EQ(seen, "k1");
}

TEST(ServerSpan, SamplesNewTracesByRatioFromTheTraceId) {
  int sampled = 0;
  for (int i = 0; i < 2000; ++i) sampled += ServerSpan::Open("", 0.25).context.sampled ? 1 : 0;
  // Binomial(2000, 0.25): mean 500, sd ~19.4; 8 sd either side.
  EXPECT_GT(sampled, 345);
  EXPECT_LT(sampled, 655);
  EXPECT_FALSE(ServerSpan::Open("", 0.0).context.sampled);
  EXPECT_TRUE(ServerSpan::Open("", 1.0).context.sampled);
  // A client's decision stands whatever the ratio.
  EXPECT_TRUE(ServerSpan::Open("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", 0.0).context.sampled);
  EXPECT_FALSE(ServerSpan::Open("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", 1.0).context.sampled);
}

}  // namespace
}  // namespace ropeserve::api
