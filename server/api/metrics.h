// Prometheus metrics (prometheus-cpp), exported at GET /metrics.
//
// The engine reports through EngineObserver hooks (per finished request and
// per step); the serving layers count requests per endpoint, protocol and
// status. Gauges and engine counters are refreshed from Engine::stats() at
// scrape time, so they are current even when the engine is idle.
//
// Names and meanings follow vLLM's (prefixed ropeserve_ instead of vllm:),
// because the Kubernetes Gateway API Inference Extension routes on
// num_requests_running, num_requests_waiting and kv_cache_usage_perc.
#pragma once

#include <memory>
#include <string>

#include "server/engine/engine.h"

namespace ropeserve::api {

class ServerMetrics : public EngineObserver {
 public:
  ServerMetrics();
  ~ServerMetrics() override;
  // The engine whose stats() are read at scrape time (it must outlive
  // Render calls, or be detached with nullptr) and its cache configuration.
  void Attach(const Engine* engine, int block_size, int num_blocks);

  // EngineObserver (engine thread).
  void OnRequestFinished(const RequestMetrics& m) override;
  void OnStep(const StepMetrics& m) override;

  // One request answered: `code` is the HTTP status or the gRPC code name.
  void CountRequest(const std::string& endpoint, const std::string& protocol, const std::string& code);
  void ObserveQaLatency(double seconds);

  // The Prometheus text exposition format (version 0.0.4).
  std::string Render();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ropeserve::api
