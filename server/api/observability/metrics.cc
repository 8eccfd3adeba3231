#include "server/api/observability/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string_view>
#include <type_traits>

#include "server/api/observability/tracing.h"
#include "server/common/process_stats.h"

namespace ropeserve::api {

namespace pm = prometheus;

namespace {

// Bucket bounds in seconds, as vLLM's (so dashboards carry over).
const pm::Histogram::BucketBoundaries kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                                      0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                                      20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const pm::Histogram::BucketBoundaries kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                                     0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const pm::Histogram::BucketBoundaries kLatencyBuckets = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                                         5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                                         60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const pm::Histogram::BucketBoundaries kStepTokenBuckets = {1,   2,   4,    8,    16,   32,   64,   128,
                                                           256, 512, 1024, 2048, 4096, 8192, 16384};

// vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to `max`.
pm::Histogram::BucketBoundaries OneTwoFive(std::int64_t max) {
  pm::Histogram::BucketBoundaries b;
  for (double scale = 1; b.empty() || b.back() < static_cast<double>(max); scale *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * scale > static_cast<double>(std::max<std::int64_t>(max, 1))) return b;
      b.push_back(m * scale);
    }
  }
  return b;
}

pm::Labels ModelLabel(const std::string& name) { return {{"model_name", name}}; }

// prometheus-cpp's builder for metrics of type M.
template <typename M>
auto Build() {
  if constexpr (std::is_same_v<M, pm::Counter>)
    return pm::BuildCounter();
  else if constexpr (std::is_same_v<M, pm::Gauge>)
    return pm::BuildGauge();
  else
    return pm::BuildHistogram();
}

pm::Family<pm::Counter>& CounterFamily(pm::Registry& r, const std::string& name, const std::string& help,
                                       const pm::Labels& labels = {}) {
  return Build<pm::Counter>().Name(name).Help(help).Labels(labels).Register(r);
}

// The one unlabelled-by-the-caller metric of a family (histograms take
// their bucket bounds in `args`).
template <typename M, typename... Args>
M& One(pm::Registry& r, const std::string& name, const std::string& help, const pm::Labels& labels,
       const Args&... args) {
  return Build<M>().Name(name).Help(help).Labels(labels).Register(r).Add({}, args...);
}

// One metric under both names: ropeserve_<suffix> and vllm:<suffix>.
template <typename M>
struct Twin {
  M* ours = nullptr;
  M* vllm = nullptr;
};

// `ours` names the ropeserve_ twin where vLLM's name breaks Prometheus'
// naming rules (a histogram called *_total).
template <typename M, typename... Args>
Twin<M> Both(pm::Registry& r, const std::string& suffix, const std::string& help, const pm::Labels& labels,
             const std::string& ours, const Args&... args) {
  return {&One<M>(r, "ropeserve_" + (ours.empty() ? suffix : ours), help, labels, args...),
          &One<M>(r, "vllm:" + suffix, help, labels, args...)};
}
Twin<pm::Histogram> Hist(pm::Registry& r, const std::string& suffix, const std::string& help, const pm::Labels& labels,
                         const pm::Histogram::BucketBoundaries& b, const std::string& ours = "") {
  return Both<pm::Histogram>(r, suffix, help, labels, ours, b);
}
Twin<pm::Counter> Count(pm::Registry& r, const std::string& suffix, const std::string& help, const pm::Labels& labels) {
  return Both<pm::Counter>(r, suffix, help, labels, "");
}
Twin<pm::Gauge> Gauge(pm::Registry& r, const std::string& suffix, const std::string& help, const pm::Labels& labels) {
  return Both<pm::Gauge>(r, suffix, help, labels, "");
}
void Observe(const Twin<pm::Histogram>& h, double v) {
  h.ours->Observe(v);
  h.vllm->Observe(v);
}
void Increment(const Twin<pm::Counter>& c, double v) {
  c.ours->Increment(v);
  c.vllm->Increment(v);
}
void Set(const Twin<pm::Gauge>& g, double v) {
  g.ours->Set(v);
  g.vllm->Set(v);
}
// Brings a Prometheus counter up to a running total kept elsewhere.
void SyncCounter(pm::Counter& c, double total) {
  const double now = c.Value();
  if (total > now) c.Increment(total - now);
}
void Sync(const Twin<pm::Counter>& c, double total) {
  SyncCounter(*c.ours, total);
  SyncCounter(*c.vllm, total);
}

}  // namespace

const char* VllmFinishedReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kError:
      return "error";
    case FinishReason::kCancelled:
    case FinishReason::kDeadline:
    case FinishReason::kRejected:
      return "abort";
  }
  return "abort";
}

// The families labelled with the served model, created by SetModel.
struct ServerMetrics::ModelFamilies {
  ModelFamilies(pm::Registry& r, const ServedModelInfo& m) : block_size(m.block_size) {
    const pm::Labels labels = ModelLabel(m.name);
    const auto tokens = OneTwoFive(m.max_model_len > 0 ? m.max_model_len : 1 << 20);
    queue_time =
        Hist(r, "request_queue_time_seconds", "Time from arrival to first being scheduled", labels, kLatencyBuckets);
    prefill_time = Hist(r, "request_prefill_time_seconds", "Time from first being scheduled to the first token", labels,
                        kLatencyBuckets);
    decode_time = Hist(r, "request_decode_time_seconds", "Time from the first token to the end of the request", labels,
                       kLatencyBuckets);
    inference_time = Hist(r, "request_inference_time_seconds", "Time from first being scheduled to the end", labels,
                          kLatencyBuckets);
    ttft = Hist(r, "time_to_first_token_seconds", "Time from arrival to the first token", labels, kTtftBuckets);
    itl = Hist(r, "inter_token_latency_seconds", "Time between consecutive tokens of a request", labels, kItlBuckets);
    e2e = Hist(r, "e2e_request_latency_seconds", "Time from arrival to the end of a generation request", labels,
               kLatencyBuckets);
    prompt_hist = Hist(r, "request_prompt_tokens", "Prompt tokens per finished request", labels, tokens);
    generation_hist = Hist(r, "request_generation_tokens", "Generated tokens per finished request", labels, tokens);
    iteration_tokens = Hist(r, "iteration_tokens_total", "Tokens (prefill chunks + decodes) computed per engine step",
                            labels, kStepTokenBuckets, "iteration_tokens");
    prompt_tokens = Count(r, "prompt_tokens_total", "Prompt tokens of finished requests", labels);
    generation_tokens = Count(r, "generation_tokens_total", "Tokens generated", labels);
    preemptions = Count(r, "num_preemptions_total",
                        "Requests preempted (KV blocks freed, recomputed later) for lack of KV blocks", labels);
    prefix_queries = Count(r, "prefix_cache_queries_total",
                           "Prompt tokens (in full KV blocks) looked up in the prefix cache", labels);
    prefix_hits =
        Count(r, "prefix_cache_hits_total", "Prompt tokens (in full KV blocks) found in the prefix cache", labels);
    // Speculative decoding, vLLM's spec_decode counters (the accepted
    // tokens per position: one series per proposal slot).
    spec_drafts = Count(r, "spec_decode_num_drafts_total", "Decode steps of a request that carried proposals", labels);
    spec_draft_tokens = Count(r, "spec_decode_num_draft_tokens_total", "Proposed tokens verified", labels);
    spec_accepted = Count(r, "spec_decode_num_accepted_tokens_total", "Proposed tokens accepted", labels);
    const char* per_pos_help = "Proposed tokens accepted, by their position in the proposal (0 = the first)";
    for (const char* name : {"ropeserve_spec_decode_num_accepted_tokens_per_pos_total",
                             "vllm:spec_decode_num_accepted_tokens_per_pos_total"}) {
      auto& family = CounterFamily(r, name, per_pos_help, labels);
      for (int i = 0; i < m.num_speculative_tokens; ++i)
        spec_accepted_per_pos[static_cast<std::size_t>(i)].push_back(&family.Add({{"position", std::to_string(i)}}));
    }
    running = Gauge(r, "num_requests_running", "Requests in the running batch", labels);
    waiting = Gauge(r, "num_requests_waiting", "Requests waiting to be scheduled", labels);
    kv_usage = Gauge(r, "kv_cache_usage_perc", "Fraction of KV cache blocks in use (0-1; 1 = full)", labels);
    const char* success_help = "Finished requests, by finished_reason (stop, length, abort, error)";
    success = {&CounterFamily(r, "ropeserve_request_success_total", success_help, labels),
               &CounterFamily(r, "vllm:request_success_total", success_help, labels)};
    pm::Labels cache = labels;
    cache.emplace("block_size", std::to_string(m.block_size));
    cache.emplace("num_gpu_blocks", std::to_string(m.num_blocks));  // vLLM's name, whatever the device
    Set(Both<pm::Gauge>(r, "cache_config_info", "KV cache configuration (value 1; the labels carry it)", cache, ""), 1);
    qa_window_tokens =
        &One<pm::Counter>(r, "ropeserve_qa_window_tokens_total",
                          "Tokens of encoder windows (question answering and embeddings) run in engine steps",
                          ModelLabel(m.qa_name.empty() ? m.name : m.qa_name));
  }

  double block_size;  // the pool counts prefix-cache blocks; exported as tokens
  Twin<pm::Histogram> queue_time, prefill_time, decode_time, inference_time, ttft, itl, e2e, prompt_hist,
      generation_hist, iteration_tokens;
  Twin<pm::Counter> prompt_tokens, generation_tokens, preemptions, prefix_queries, prefix_hits, spec_drafts,
      spec_draft_tokens, spec_accepted;
  std::array<std::vector<pm::Counter*>, kMaxSpeculativeTokens> spec_accepted_per_pos;  // ours and vLLM's
  Twin<pm::Gauge> running, waiting, kv_usage;
  Twin<pm::Family<pm::Counter>> success;
  pm::Counter* qa_window_tokens = nullptr;
};

struct ServerMetrics::Impl {
  std::shared_ptr<pm::Registry> registry = std::make_shared<pm::Registry>();
  std::unique_ptr<ModelFamilies> model_storage;
  std::atomic<ModelFamilies*> model{nullptr};
  std::atomic<const Engine*> engine{nullptr};
  std::atomic<const Tracer*> tracer{nullptr};
  std::mutex mu;  // SetModel and Render's syncing
  pm::Family<pm::Counter>& requests =
      CounterFamily(*registry, "ropeserve_requests_total", "Requests answered, by endpoint, protocol and status code");
  pm::Counter& spans_exported =
      One<pm::Counter>(*registry, "ropeserve_otlp_spans_exported_total", "Trace spans the OTLP collector accepted", {});
  pm::Counter& spans_dropped =
      One<pm::Counter>(*registry, "ropeserve_otlp_spans_dropped_total",
                       "Trace spans lost: export queue full, or the collector failed or was too slow", {});
  pm::Counter& kv_events_published = One<pm::Counter>(*registry, "ropeserve_kv_events_published_total",
                                                      "KV cache event batches sent (--kv-events-endpoint)", {});
  pm::Counter& kv_events_dropped =
      One<pm::Counter>(*registry, "ropeserve_kv_events_dropped_total",
                       "KV cache event batches lost to a full publisher queue (subscribers see a gap)", {});
  std::function<std::pair<std::uint64_t, std::uint64_t>()> kv_events_source;  // under mu
  pm::Counter& offload_saved = One<pm::Counter>(*registry, "ropeserve_kv_offload_saved_blocks_total",
                                                "KV blocks the prefix cache evicted into the host tier", {});
  pm::Counter& offload_loaded =
      One<pm::Counter>(*registry, "ropeserve_kv_offload_loaded_blocks_total",
                       "KV blocks copied back from the host tier instead of computed (--kv-offload-memory)", {});
  pm::Counter& offload_dropped = One<pm::Counter>(*registry, "ropeserve_kv_offload_dropped_blocks_total",
                                                  "KV blocks the host tier dropped (least recently used)", {});
  pm::Counter& offload_skipped =
      One<pm::Counter>(*registry, "ropeserve_kv_offload_skipped_blocks_total",
                       "Evicted KV blocks the host tier could not take (every slot pinned by a load)", {});
  pm::Counter& offload_failed_copies =
      One<pm::Counter>(*registry, "ropeserve_kv_offload_failed_copies_total",
                       "Copies to or from the host tier that failed (their blocks dropped or computed)", {});
  pm::Gauge& offload_used =
      One<pm::Gauge>(*registry, "ropeserve_kv_offload_blocks", "KV blocks the host tier holds now", {});
  pm::Gauge& resident = One<pm::Gauge>(*registry, "process_resident_memory_bytes", "Resident memory size in bytes", {});
  pm::Gauge& virtual_bytes =
      One<pm::Gauge>(*registry, "process_virtual_memory_bytes", "Virtual memory size in bytes", {});
  pm::Gauge& open_fds = One<pm::Gauge>(*registry, "process_open_fds", "Open file descriptors", {});
  pm::Gauge& max_fds = One<pm::Gauge>(*registry, "process_max_fds", "Maximum number of open file descriptors", {});
  pm::Gauge& start_time = One<pm::Gauge>(*registry, "process_start_time_seconds",
                                         "Start time of the process since the Unix epoch in seconds", {});
  pm::Counter& cpu =
      One<pm::Counter>(*registry, "process_cpu_seconds_total", "Total user and system CPU time spent in seconds", {});
  pm::Family<pm::Histogram>& embedding_latency =
      Build<pm::Histogram>()
          .Name("ropeserve_embedding_request_latency_seconds")
          .Help("Time from arrival to the embeddings of an embedding request, by model")
          .Register(*registry);
  // By model too: a QA model may be served without a decoder (no SetModel).
  pm::Family<pm::Histogram>& qa_latency = Build<pm::Histogram>()
                                              .Name("ropeserve_qa_request_latency_seconds")
                                              .Help("Time from arrival to the answer of a question-answering request")
                                              .Register(*registry);
  std::function<BatchGauges()> batches_source;  // under mu
  pm::Family<pm::Gauge>& batches = Build<pm::Gauge>()
                                       .Name("ropeserve_batches")
                                       .Help("Batches of the Batch API stored, by status")
                                       .Register(*registry);
  pm::Family<pm::Gauge>& batch_lines =
      Build<pm::Gauge>()
          .Name("ropeserve_batch_lines")
          .Help(
              "Requests (lines) of stored batches, by the batch's status and the line's state: pending, running, "
              "completed, failed")
          .Register(*registry);
  pm::Gauge& quarantined_files =
      One<pm::Gauge>(*registry, "ropeserve_storage_quarantined_files",
                     "Files found at start-up under the data directory's files/ that its database does not list, "
                     "moved to quarantine/ (never deleted)",
                     {});
};

ServerMetrics::ServerMetrics() : impl_(std::make_unique<Impl>()) {
  One<pm::Gauge>(*impl_->registry, "ropeserve_build_info", "The server's build (value 1; the labels carry it)",
                 {{"version", ROPESERVE_VERSION}, {"compiler", __VERSION__}})
      .Set(1);
}

ServerMetrics::~ServerMetrics() = default;

void ServerMetrics::SetModel(const ServedModelInfo& model) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->model_storage) return;
  impl_->model_storage = std::make_unique<ModelFamilies>(*impl_->registry, model);
  impl_->model = impl_->model_storage.get();
}

void ServerMetrics::Attach(const Engine* engine) { impl_->engine = engine; }

void ServerMetrics::AttachTracer(const Tracer* tracer) { impl_->tracer = tracer; }

void ServerMetrics::AttachBatches(std::function<BatchGauges()> source) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->batches_source = std::move(source);
}

void ServerMetrics::AttachKvEvents(std::function<std::pair<std::uint64_t, std::uint64_t>()> source) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->kv_events_source = std::move(source);
}

void ServerMetrics::OnRequestFinished(const RequestMetrics& m) {
  ModelFamilies* f = impl_->model.load();
  if (f == nullptr) return;
  if (m.queue_seconds >= 0) Observe(f->queue_time, m.queue_seconds);
  if (m.ttft_seconds >= 0) {
    Observe(f->ttft, m.ttft_seconds);
    Observe(f->prefill_time, std::max(0.0, m.ttft_seconds - m.queue_seconds));
    Observe(f->decode_time, std::max(0.0, m.e2e_seconds - m.ttft_seconds));
  }
  Observe(f->inference_time, std::max(0.0, m.e2e_seconds - m.queue_seconds));
  for (double gap : m.inter_token_seconds) Observe(f->itl, gap);
  Observe(f->e2e, m.e2e_seconds);
  Observe(f->prompt_hist, static_cast<double>(m.prompt_tokens));
  Observe(f->generation_hist, static_cast<double>(m.generated_tokens));
  Increment(f->prompt_tokens, static_cast<double>(m.prompt_tokens));
  f->success.ours->Add({{"finished_reason", FinishReasonName(m.finish_reason)}}).Increment();
  f->success.vllm->Add({{"finished_reason", VllmFinishedReason(m.finish_reason)}}).Increment();
}

void ServerMetrics::OnStep(const StepMetrics& m) {
  ModelFamilies* f = impl_->model.load();
  if (f == nullptr) return;
  if (m.scheduled_tokens > 0) Observe(f->iteration_tokens, static_cast<double>(m.scheduled_tokens));
  if (m.encoder_tokens > 0) f->qa_window_tokens->Increment(static_cast<double>(m.encoder_tokens));
}

void ServerMetrics::CountRequest(const std::string& endpoint, const std::string& protocol, const std::string& code) {
  impl_->requests.Add({{"endpoint", endpoint}, {"protocol", protocol}, {"code", code}}).Increment();
}

void ServerMetrics::ObserveEmbeddingLatency(const std::string& model, double seconds) {
  impl_->embedding_latency.Add({{"model_name", model}}, pm::Histogram::BucketBoundaries(kTtftBuckets)).Observe(seconds);
}

void ServerMetrics::AddQaModel(const std::string& model) {
  impl_->qa_latency.Add({{"model_name", model}}, pm::Histogram::BucketBoundaries(kLatencyBuckets));
}

void ServerMetrics::ObserveQaLatency(const std::string& model, double seconds) {
  impl_->qa_latency.Add({{"model_name", model}}, pm::Histogram::BucketBoundaries(kLatencyBuckets)).Observe(seconds);
}

std::string ServerMetrics::Render() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    ModelFamilies* f = impl_->model.load();
    const Engine* e = impl_->engine.load();
    if (f != nullptr && e != nullptr) {
      const EngineStats& s = e->stats();
      Set(f->running, s.running.load());
      Set(f->waiting, s.waiting.load());
      Set(f->kv_usage, s.kv_usage.load());
      Sync(f->generation_tokens, static_cast<double>(s.generated_tokens.load()));
      Sync(f->preemptions, static_cast<double>(s.preemptions.load()));
      // The pool counts blocks; like vLLM, export tokens.
      Sync(f->prefix_queries, f->block_size * static_cast<double>(s.prefix_queries.load()));
      Sync(f->prefix_hits, f->block_size * static_cast<double>(s.prefix_hits.load()));
      Sync(f->spec_drafts, static_cast<double>(s.spec_drafts.load()));
      Sync(f->spec_draft_tokens, static_cast<double>(s.spec_draft_tokens.load()));
      Sync(f->spec_accepted, static_cast<double>(s.spec_accepted_tokens.load()));
      for (std::size_t i = 0; i < f->spec_accepted_per_pos.size(); ++i)
        for (pm::Counter* c : f->spec_accepted_per_pos[i])
          SyncCounter(*c, static_cast<double>(s.spec_accepted_per_position[i].load()));
      SyncCounter(impl_->offload_saved, static_cast<double>(s.offload_saved.load()));
      SyncCounter(impl_->offload_loaded, static_cast<double>(s.offload_loaded.load()));
      SyncCounter(impl_->offload_dropped, static_cast<double>(s.offload_dropped.load()));
      SyncCounter(impl_->offload_skipped, static_cast<double>(s.offload_skipped.load()));
      SyncCounter(impl_->offload_failed_copies, static_cast<double>(s.offload_failed_copies.load()));
      impl_->offload_used.Set(static_cast<double>(s.offload_used.load()));
    }
    if (const Tracer* t = impl_->tracer.load(); t != nullptr && t->exporter() != nullptr) {
      SyncCounter(impl_->spans_exported, static_cast<double>(t->exporter()->exported()));
      SyncCounter(impl_->spans_dropped, static_cast<double>(t->exporter()->dropped()));
    }
    if (impl_->kv_events_source) {
      const auto [published, dropped] = impl_->kv_events_source();
      SyncCounter(impl_->kv_events_published, static_cast<double>(published));
      SyncCounter(impl_->kv_events_dropped, static_cast<double>(dropped));
    }
    if (impl_->batches_source) {
      const BatchGauges g = impl_->batches_source();
      // Every status and state is exported (0 when none), so a series
      // drops to 0 rather than keeping a stale value.
      for (const char* status :
           {"validating", "in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled"}) {
        BatchGauges::Row row;
        for (const auto& r : g.rows)
          if (r.status == status) row = r;
        const std::int64_t running = std::string_view(status) == "in_progress" ? g.running : 0;
        impl_->batches.Add({{"status", status}}).Set(static_cast<double>(row.batches));
        auto line = [&](const char* state, std::int64_t n) {
          impl_->batch_lines.Add({{"batch_status", status}, {"state", state}}).Set(static_cast<double>(n));
        };
        line("pending", std::max<std::int64_t>(0, row.pending - running));
        line("running", running);
        line("completed", row.completed);
        line("failed", row.failed);
      }
      impl_->quarantined_files.Set(static_cast<double>(g.quarantined_files));
    }
    if (auto p = ReadProcessStats()) {
      impl_->resident.Set(p->resident_bytes);
      impl_->virtual_bytes.Set(p->virtual_bytes);
      impl_->open_fds.Set(p->open_fds);
      impl_->max_fds.Set(p->max_fds);
      impl_->start_time.Set(p->start_time_seconds);
      SyncCounter(impl_->cpu, p->cpu_seconds);
    }
  }
  return pm::TextSerializer().Serialize(impl_->registry->Collect());
}

}  // namespace ropeserve::api
