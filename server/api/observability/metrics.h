// Prometheus metrics (prometheus-cpp), exported at GET /metrics.
//
// The engine reports through EngineObserver hooks (per finished request and
// per step); the serving layers count requests per endpoint, protocol and
// status. Gauges and engine counters are refreshed from Engine::stats() at
// scrape time, so they are current even when the engine is idle.
//
// Every engine metric is exported twice, with the same value and a
// `model_name` label: as `vllm:<name>` (vLLM's exact names, labels and
// buckets, so vLLM's Grafana dashboards and the Gateway API Inference
// Extension's endpoint picker work unchanged) and as `ropeserve_<name>`.
// ropeserve's own metrics (QA, requests by endpoint, build info, OTLP
// export) and the standard process_* ones have no vLLM twin. docs/api.md
// lists them all.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/engine/engine.h"

namespace ropeserve::api {

class Tracer;  // server/api/observability/tracing.h

// What the per-model metrics are labelled with and sized by.
struct ServedModelInfo {
  std::string name;     // the model_name label (--served-model-name)
  std::string qa_name;  // the QA model's, "" without one
  int block_size = 0;
  int num_blocks = 0;
  std::int64_t max_model_len = 0;  // bounds the token-count histograms
  int num_speculative_tokens = 0;  // serve --num-speculative-tokens when speculating (0: off)
};

// The Batch API's progress, read at scrape time (server/batch/).
struct BatchGauges {
  struct Row {
    std::string status;  // the batches' status
    std::int64_t batches = 0, pending = 0, completed = 0, failed = 0;
  };
  std::vector<Row> rows;
  std::int64_t running = 0;  // lines running now (of in-progress batches)
  // Files the start-up moved from the data directory's files/ to
  // quarantine/ (batch::FileStore::quarantined).
  std::int64_t quarantined_files = 0;
};

class ServerMetrics : public EngineObserver {
 public:
  ServerMetrics();
  ~ServerMetrics() override;
  // Creates the per-model families (once; later calls are ignored). Until
  // then engine observations are dropped and only the server's own metrics
  // (requests, build, process) are exported.
  void SetModel(const ServedModelInfo& model);
  // The engine whose stats() are read at scrape time; it must outlive
  // Render calls, or be detached with nullptr.
  void Attach(const Engine* engine);
  // Export counters of the tracer's OTLP exporter, when it has one.
  void AttachTracer(const Tracer* tracer);
  // ropeserve_batches{status}, ropeserve_batch_lines{batch_status,
  // state} and ropeserve_storage_quarantined_files; null detaches (the
  // gauges then keep their last values).
  void AttachBatches(std::function<BatchGauges()> source);
  // KV cache event batches published and dropped (serve
  // --kv-events-endpoint): ropeserve_kv_events_{published,dropped}_total.
  void AttachKvEvents(std::function<std::pair<std::uint64_t, std::uint64_t>()> source);

  // EngineObserver (engine thread).
  void OnRequestFinished(const RequestMetrics& m) override;
  void OnStep(const StepMetrics& m) override;

  // One request answered: `code` is the HTTP status or the gRPC code name.
  void CountRequest(const std::string& endpoint, const std::string& protocol, const std::string& code);
  // ropeserve_qa_request_latency_seconds{model_name}: AddQaModel exports
  // the model's series (empty) from the start, as SetModel does the decoder's.
  void AddQaModel(const std::string& model);
  void ObserveQaLatency(const std::string& model, double seconds);
  // ropeserve_embedding_request_latency_seconds{model_name}.
  void ObserveEmbeddingLatency(const std::string& model, double seconds);

  // The Prometheus text exposition format (version 0.0.4).
  std::string Render();

 private:
  struct Impl;
  struct ModelFamilies;
  std::unique_ptr<Impl> impl_;
};

// vLLM's finished_reason label for an engine finish reason: stop, length,
// abort (cancelled, deadline, rejected) or error.
const char* VllmFinishedReason(FinishReason reason);

}  // namespace ropeserve::api
