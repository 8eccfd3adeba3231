// The extractive-QA model behind /v1/qa and gRPC Answer: a span model
// (EncoderQaModel), its tokenizer, and one worker thread that packs the
// windows of concurrent requests into forwards of at most
// max_batch_tokens tokens (no padding), then selects each request's answers
// (server/qa). QA runs beside the decoder engine, not inside its steps (see
// docs/qa.md). Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/checkpoint/encoder_config.h"
#include "server/common/status.h"
#include "server/qa/span_scoring.h"
#include "server/qa/windows.h"

namespace ropeserve::api {

class ServerMetrics;

struct QaRequest {
  std::string question;
  std::string context;
  qa::WindowOptions windows;
  qa::QaOptions options;
};

struct QaResult {
  std::vector<qa::Answer> answers;
  std::int64_t tokens = 0;   // tokens of all windows
  std::int64_t windows = 0;
};

struct QaServiceOptions {
  std::int64_t max_batch_tokens = 8192;  // per forward
  std::int64_t max_queue_requests = 1024;
  ServerMetrics* metrics = nullptr;
};

class QaService {
 public:
  // Loads config.json, model.safetensors and tokenizer.json from `dir`.
  static StatusOr<std::unique_ptr<QaService>> Create(const std::string& dir, std::string served_name,
                                                     QaServiceOptions options = {});
  ~QaService();

  const std::string& name() const { return name_; }
  // "qa-<n>", unique within the process.
  std::string NextRequestId() { return "qa-" + std::to_string(++counter_); }
  const EncoderConfig& config() const;
  // Windows the request, waits for its forwards and selects answers.
  // `timeout_seconds` > 0 bounds the wait (DeadlineExceeded).
  StatusOr<QaResult> Answer(const QaRequest& request, double timeout_seconds = 0);
  // Several pairs, packed together.
  StatusOr<std::vector<QaResult>> AnswerBatch(const std::vector<QaRequest>& requests, double timeout_seconds = 0);

 private:
  QaService() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string name_;
  std::atomic<std::uint64_t> counter_{0};
};

}  // namespace ropeserve::api
