// Request tracing: one server span per REST request or gRPC call, and under
// it, per engine request (a completion choice, a document's chunk), a
// "generate" span with "queue", "prefill" and "decode" children built from
// the engine's timings (RequestMetrics).
//
// Every request gets trace ids (from the client's `traceparent`, else new
// ones): they appear in the access log and the `traceresponse` header /
// metadata whether or not spans are exported. Spans are recorded only for
// sampled traces and only with an exporter (--otlp-traces-endpoint).
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/api/observability/otlp_exporter.h"
#include "server/common/trace_context.h"
#include "server/engine/engine.h"

namespace ropeserve::api {

// A front end's span for one request, opened when it arrives.
struct ServerSpan {
  TraceContext context;                     // the trace and this span's id
  std::array<std::uint8_t, 8> parent_id{};  // the client's span (zero without traceparent)
  std::chrono::system_clock::time_point start;

  // From the client's traceparent header / metadata (any malformed or
  // absent one starts a new trace, as the W3C spec asks). A client's trace
  // keeps its sampled flag; a new one is sampled with probability
  // `sample_ratio`, decided from its trace id as OpenTelemetry's
  // TraceIdRatioBased sampler does (parent-based sampling overall).
  static ServerSpan Open(std::string_view traceparent, double sample_ratio = 1.0);
  // The value of the `traceresponse` header: this span in traceparent form.
  std::string TraceResponse() const { return context.ToTraceparent(); }
};

class Tracer : public EngineObserver {
 public:
  // `exporter` may be null: ids only, no spans recorded. `sample_ratio`
  // (0-1): the share of new traces that are recorded.
  explicit Tracer(std::unique_ptr<OtlpExporter> exporter, double sample_ratio = 1.0);
  ~Tracer() override;

  // A front end's span for a request that arrived with this traceparent.
  ServerSpan Open(std::string_view traceparent) const { return ServerSpan::Open(traceparent, sample_ratio_); }

  bool exporting() const { return exporter_ != nullptr; }
  const OtlpExporter* exporter() const { return exporter_.get(); }

  // Closes a front end's span (name e.g. "POST /v1/completions" or
  // "grpc Generate"); `error` marks a failed request.
  void EndServerSpan(const ServerSpan& span, std::string name, std::vector<SpanAttribute> attributes, bool error,
                     std::string status_message = {});

  // EngineObserver: spans of engine requests whose trace is sampled.
  void OnRequestFinished(const RequestMetrics& m) override;
  void OnStep(const StepMetrics&) override {}

 private:
  std::unique_ptr<OtlpExporter> exporter_;
  double sample_ratio_;
};

// `tracer`'s Open, or a span sampled as with no tracer (tests, tools).
inline ServerSpan OpenServerSpan(const Tracer* tracer, std::string_view traceparent) {
  return tracer != nullptr ? tracer->Open(traceparent) : ServerSpan::Open(traceparent);
}

// The spans of one finished engine request that ended at `end`: "generate"
// under m.trace's span, with "queue", "prefill" and "decode" children (the
// last two only when a token was produced). Pure: tested directly.
std::vector<SpanRecord> EngineRequestSpans(const RequestMetrics& m, std::chrono::system_clock::time_point end);

// Forwards the engine's hooks to several observers (metrics, tracing).
class ObserverFanOut : public EngineObserver {
 public:
  explicit ObserverFanOut(std::vector<EngineObserver*> observers) : observers_(std::move(observers)) {}
  void OnRequestFinished(const RequestMetrics& m) override {
    for (auto* o : observers_) o->OnRequestFinished(m);
  }
  void OnStep(const StepMetrics& m) override {
    for (auto* o : observers_) o->OnStep(m);
  }

 private:
  std::vector<EngineObserver*> observers_;
};

}  // namespace ropeserve::api
