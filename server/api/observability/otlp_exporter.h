// Spans sent to an OpenTelemetry collector over OTLP/HTTP with the JSON
// encoding (https://opentelemetry.io/docs/specs/otlp/#otlphttp).
//
// Written by hand because Debian 12 packages no OpenTelemetry C++ SDK; the
// protocol needed here is one JSON POST per batch, made with cpp-httplib's
// client (the HTTP library the server already uses).
//
// Export never blocks a request: Export() appends to a bounded queue that a
// background thread drains in batches (every `flush_interval`, or sooner
// when a batch is full). When the collector is slow or down, the queue
// fills and further spans are dropped and counted, never waited for.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "server/common/status.h"
#include "server/common/trace_context.h"

namespace httplib {
class Client;
}

namespace ropeserve::api {

using SpanAttribute = std::pair<std::string, std::variant<std::string, std::int64_t, double, bool>>;

enum class SpanKind { kInternal = 1, kServer = 2 };

struct SpanRecord {
  TraceContext context;                     // the trace and this span's id
  std::array<std::uint8_t, 8> parent_id{};  // all zero: a root span
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  std::int64_t start_unix_nanos = 0;
  std::int64_t end_unix_nanos = 0;
  std::vector<SpanAttribute> attributes;
  bool error = false;  // status code ERROR (else UNSET)
  std::string status_message;
};

// The ExportTraceServiceRequest JSON of `spans` (one resource with
// service.name, one scope), ids in hex as OTLP/JSON requires.
std::string OtlpTracesJson(const std::vector<SpanRecord>& spans, const std::string& service_name);

// Nanoseconds since the Unix epoch.
std::int64_t UnixNanos(std::chrono::system_clock::time_point t);

struct OtlpExporterOptions {
  // http(s)://host[:port][/path]; without a path, /v1/traces.
  std::string endpoint;
  std::string service_name = "ropeserve";
  std::size_t max_queue_spans = 4096;
  std::size_t max_batch_spans = 512;
  std::chrono::milliseconds flush_interval{1000};
  std::chrono::milliseconds timeout{5000};  // per POST (connect 1 s at most)
  // Sent with every POST (a hosted collector's API key, a tenant id).
  std::vector<std::pair<std::string, std::string>> headers;
};

// OTEL_EXPORTER_OTLP_HEADERS' format: "key1=value1,key2=value2", values
// percent-encoded, blanks around items ignored. Keys must be HTTP header
// names; values may not hold control characters (no header injection).
StatusOr<std::vector<std::pair<std::string, std::string>>> ParseOtlpHeaders(std::string_view text);

class OtlpExporter {
 public:
  // Checks the endpoint's form and starts the sending thread; nothing is
  // sent before the first span.
  static StatusOr<std::unique_ptr<OtlpExporter>> Start(OtlpExporterOptions options);
  // Sends what is queued (one attempt, within the timeout) and stops.
  ~OtlpExporter();
  OtlpExporter(const OtlpExporter&) = delete;
  OtlpExporter& operator=(const OtlpExporter&) = delete;

  // Queues one span; never blocks on the network (drops when full).
  void Export(SpanRecord span);

  std::uint64_t exported() const { return exported_.load(); }
  // Spans lost: the queue was full, or the collector refused or did not answer.
  std::uint64_t dropped() const { return dropped_.load(); }

 private:
  explicit OtlpExporter(OtlpExporterOptions options, std::string scheme_host_port, std::string path);
  void Run();
  bool Post(const std::vector<SpanRecord>& batch);

  const OtlpExporterOptions options_;
  const std::string scheme_host_port_, path_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SpanRecord> queue_;
  bool stop_ = false;
  std::atomic<std::uint64_t> exported_{0}, dropped_{0};
  // The sending thread's own: one connection kept alive across batches.
  std::unique_ptr<httplib::Client> client_;
  std::chrono::steady_clock::time_point last_warning_{};
  std::thread thread_;
};

}  // namespace ropeserve::api
