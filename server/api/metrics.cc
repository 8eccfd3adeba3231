#include "server/api/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <mutex>

namespace ropeserve::api {

namespace pm = prometheus;

namespace {

// Bucket bounds in seconds, as vLLM's (so dashboards carry over).
const pm::Histogram::BucketBoundaries kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5, 0.75,
                                                       1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const pm::Histogram::BucketBoundaries kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                                                      0.75, 1.0,   2.5,  5.0,   7.5,  10.0, 20.0, 40.0, 80.0};
const pm::Histogram::BucketBoundaries kLatencyBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,    10.0,  15.0, 20.0,
                                                          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const pm::Histogram::BucketBoundaries kStepTokenBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

pm::Histogram& Hist(pm::Registry& r, const char* name, const char* help, const pm::Histogram::BucketBoundaries& b) {
  return pm::BuildHistogram().Name(name).Help(help).Register(r).Add({}, b);
}
pm::Counter& Count(pm::Registry& r, const char* name, const char* help) {
  return pm::BuildCounter().Name(name).Help(help).Register(r).Add({});
}
pm::Gauge& Gauge(pm::Registry& r, const char* name, const char* help) {
  return pm::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

// Brings a Prometheus counter up to a running total kept elsewhere.
void SyncCounter(pm::Counter& c, double total) {
  const double now = c.Value();
  if (total > now) c.Increment(total - now);
}

}  // namespace

struct ServerMetrics::Impl {
  std::atomic<const Engine*> engine{nullptr};
  std::atomic<int> block_size{0};
  std::shared_ptr<pm::Registry> registry = std::make_shared<pm::Registry>();
  pm::Histogram& queue_time = Hist(*registry, "ropeserve_request_queue_time_seconds",
                                   "Time from arrival to first being scheduled", kLatencyBuckets);
  pm::Histogram& ttft = Hist(*registry, "ropeserve_time_to_first_token_seconds", "Time from arrival to the first token",
                             kTtftBuckets);
  pm::Histogram& itl = Hist(*registry, "ropeserve_inter_token_latency_seconds",
                            "Time between consecutive tokens of a request", kItlBuckets);
  pm::Histogram& e2e = Hist(*registry, "ropeserve_e2e_request_latency_seconds",
                            "Time from arrival to the end of a generation request", kLatencyBuckets);
  pm::Histogram& qa_latency = Hist(*registry, "ropeserve_qa_request_latency_seconds",
                                   "Time from arrival to the answer of a question-answering request", kLatencyBuckets);
  pm::Histogram& step_tokens = Hist(*registry, "ropeserve_step_tokens",
                                    "Tokens (prefill chunks + decodes) computed per engine step", kStepTokenBuckets);
  pm::Counter& qa_window_tokens = Count(*registry, "ropeserve_qa_window_tokens_total",
                                       "Tokens of question-answering windows run in engine steps");
  pm::Counter& prompt_tokens = Count(*registry, "ropeserve_prompt_tokens_total", "Prompt tokens of finished requests");
  pm::Counter& generation_tokens = Count(*registry, "ropeserve_generation_tokens_total", "Tokens generated");
  pm::Counter& preemptions = Count(*registry, "ropeserve_preemptions_total",
                                   "Requests preempted (KV blocks freed, recomputed later) for lack of KV blocks");
  pm::Counter& prefix_queries = Count(*registry, "ropeserve_prefix_cache_queries_total",
                                      "Prompt tokens (in full KV blocks) looked up in the prefix cache");
  pm::Counter& prefix_hits = Count(*registry, "ropeserve_prefix_cache_hits_total",
                                   "Prompt tokens (in full KV blocks) found in the prefix cache");
  pm::Gauge& running = Gauge(*registry, "ropeserve_num_requests_running", "Requests in the running batch");
  pm::Gauge& waiting = Gauge(*registry, "ropeserve_num_requests_waiting", "Requests waiting to be scheduled");
  pm::Gauge& kv_usage = Gauge(*registry, "ropeserve_kv_cache_usage_perc",
                              "Fraction of KV cache blocks in use (0-1; 1 = full)");
  pm::Family<pm::Counter>& requests = pm::BuildCounter()
                                          .Name("ropeserve_requests_total")
                                          .Help("Requests answered, by endpoint, protocol and status code")
                                          .Register(*registry);
  std::mutex mu;  // Render's counter syncing
};

ServerMetrics::ServerMetrics() : impl_(std::make_unique<Impl>()) {}

void ServerMetrics::Attach(const Engine* engine, int block_size, int num_blocks) {
  impl_->engine = engine;
  impl_->block_size = block_size;
  if (engine == nullptr) return;
  pm::BuildGauge()
      .Name("ropeserve_cache_config_info")
      .Help("KV cache configuration (value 1; the labels carry it)")
      .Register(*impl_->registry)
      .Add({{"block_size", std::to_string(block_size)}, {"num_blocks", std::to_string(num_blocks)}})
      .Set(1);
}

ServerMetrics::~ServerMetrics() = default;

void ServerMetrics::OnRequestFinished(const RequestMetrics& m) {
  if (m.queue_seconds >= 0) impl_->queue_time.Observe(m.queue_seconds);
  if (m.ttft_seconds >= 0) impl_->ttft.Observe(m.ttft_seconds);
  for (double gap : m.inter_token_seconds) impl_->itl.Observe(gap);
  impl_->e2e.Observe(m.e2e_seconds);
  impl_->prompt_tokens.Increment(static_cast<double>(m.prompt_tokens));
}

void ServerMetrics::OnStep(const StepMetrics& m) {
  if (m.scheduled_tokens > 0) impl_->step_tokens.Observe(static_cast<double>(m.scheduled_tokens));
  if (m.encoder_tokens > 0) impl_->qa_window_tokens.Increment(static_cast<double>(m.encoder_tokens));
}

void ServerMetrics::CountRequest(const std::string& endpoint, const std::string& protocol, const std::string& code) {
  impl_->requests.Add({{"endpoint", endpoint}, {"protocol", protocol}, {"code", code}}).Increment();
}

void ServerMetrics::ObserveQaLatency(double seconds) { impl_->qa_latency.Observe(seconds); }

std::string ServerMetrics::Render() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (const Engine* e = impl_->engine.load()) {
      const EngineStats& s = e->stats();
      impl_->running.Set(s.running.load());
      impl_->waiting.Set(s.waiting.load());
      impl_->kv_usage.Set(s.kv_usage.load());
      SyncCounter(impl_->generation_tokens, static_cast<double>(s.generated_tokens.load()));
      SyncCounter(impl_->preemptions, static_cast<double>(s.preemptions.load()));
      // The pool counts blocks; like vLLM, export tokens.
      const double bs = impl_->block_size.load();
      SyncCounter(impl_->prefix_queries, bs * static_cast<double>(s.prefix_queries.load()));
      SyncCounter(impl_->prefix_hits, bs * static_cast<double>(s.prefix_hits.load()));
    }
  }
  return pm::TextSerializer().Serialize(impl_->registry->Collect());
}

}  // namespace ropeserve::api
