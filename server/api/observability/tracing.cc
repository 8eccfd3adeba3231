#include "server/api/observability/tracing.h"

#include <algorithm>

namespace ropeserve::api {

ServerSpan ServerSpan::Open(std::string_view traceparent, double sample_ratio) {
  ServerSpan s;
  s.start = std::chrono::system_clock::now();
  if (auto parent = TraceContext::Parse(traceparent)) {
    s.parent_id = parent->span_id;
    s.context = parent->NewChild();
  } else {
    s.context = TraceContext::NewRoot();
    // TraceIdRatioBased: the trace id's last 8 bytes, as a number, below
    // ratio * 2^64 (so every service sampling by ratio agrees on a trace).
    std::uint64_t low = 0;
    for (int i = 8; i < 16; ++i) low = low << 8 | s.context.trace_id[static_cast<std::size_t>(i)];
    s.context.sampled = sample_ratio >= 1.0 || static_cast<double>(low) < sample_ratio * 18446744073709551616.0;
  }
  return s;
}

Tracer::Tracer(std::unique_ptr<OtlpExporter> exporter, double sample_ratio)
    : exporter_(std::move(exporter)), sample_ratio_(sample_ratio) {}
Tracer::~Tracer() = default;

void Tracer::EndServerSpan(const ServerSpan& span, std::string name, std::vector<SpanAttribute> attributes, bool error,
                           std::string status_message) {
  if (!exporter_ || !span.context.sampled) return;
  SpanRecord r;
  r.context = span.context;
  r.parent_id = span.parent_id;
  r.name = std::move(name);
  r.kind = SpanKind::kServer;
  r.start_unix_nanos = UnixNanos(span.start);
  r.end_unix_nanos = std::max(r.start_unix_nanos, UnixNanos(std::chrono::system_clock::now()));
  r.attributes = std::move(attributes);
  r.error = error;
  r.status_message = std::move(status_message);
  exporter_->Export(std::move(r));
}

void Tracer::OnRequestFinished(const RequestMetrics& m) {
  if (!exporter_ || !m.trace.sampled || !m.trace.valid()) return;
  for (SpanRecord& s : EngineRequestSpans(m, std::chrono::system_clock::now())) exporter_->Export(std::move(s));
}

std::vector<SpanRecord> EngineRequestSpans(const RequestMetrics& m, std::chrono::system_clock::time_point end) {
  const std::int64_t end_ns = UnixNanos(end);
  auto at = [&](double seconds_after_arrival) {
    const double before_end = std::max(0.0, m.e2e_seconds - seconds_after_arrival);
    return end_ns - static_cast<std::int64_t>(before_end * 1e9);
  };
  const std::int64_t arrival = at(0);
  const std::int64_t scheduled = at(std::clamp(m.queue_seconds, 0.0, m.e2e_seconds));
  const bool has_token = m.ttft_seconds >= 0;
  const std::int64_t first_token =
      has_token ? std::max(scheduled, at(std::min(m.ttft_seconds, m.e2e_seconds))) : end_ns;

  std::vector<SpanRecord> spans;
  SpanRecord request;
  request.context = m.trace.NewChild();
  request.parent_id = m.trace.span_id;
  request.name = "generate";
  request.start_unix_nanos = arrival;
  request.end_unix_nanos = end_ns;
  // OpenTelemetry's gen_ai semantic conventions where one applies.
  request.attributes = {{"gen_ai.request.id", static_cast<std::int64_t>(m.id)},
                        {"gen_ai.usage.input_tokens", m.prompt_tokens},
                        {"gen_ai.usage.output_tokens", m.generated_tokens},
                        {"gen_ai.response.finish_reasons", std::string(FinishReasonName(m.finish_reason))},
                        {"ropeserve.cached_prompt_tokens", m.cached_tokens},
                        {"ropeserve.queue_seconds", m.queue_seconds},
                        {"ropeserve.time_to_first_token_seconds", m.ttft_seconds}};
  request.error = m.finish_reason == FinishReason::kError;
  if (request.error) request.status_message = "the forward pass failed";
  auto child = [&](const char* name, std::int64_t start, std::int64_t stop) {
    SpanRecord c;
    c.context = m.trace.NewChild();
    c.parent_id = request.context.span_id;
    c.name = name;
    c.start_unix_nanos = start;
    c.end_unix_nanos = std::max(start, stop);
    spans.push_back(std::move(c));
  };
  child("queue", arrival, scheduled);
  if (has_token) {
    child("prefill", scheduled, first_token);
    spans.back().attributes = {{"ropeserve.prompt_tokens", m.prompt_tokens},
                               {"ropeserve.cached_prompt_tokens", m.cached_tokens}};
    child("decode", first_token, end_ns);
    spans.back().attributes = {{"ropeserve.output_tokens", m.generated_tokens}};
  }
  spans.insert(spans.begin(), std::move(request));
  return spans;
}

}  // namespace ropeserve::api
