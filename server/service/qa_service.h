// The extractive-QA service behind /v1/qa, gRPC Answer and `ropeserve qa`:
// a span model (server/models/span_model.h) and its tokenizer. A request becomes its windows, queued
// as one encoder job (server/engine/encoder_queue.h); the decoder engine's
// steps run the windows of concurrent requests packed without padding, in
// the part of each step's token budget that decodes and prefill chunks
// leave (see docs/qa.md). Without an engine, a worker thread of the service
// runs them in forwards of at most max_batch_tokens. Answers are selected
// (server/qa) on the caller's thread (AnswerBatch) or on the `post`
// executor (AnswerBatchAsync). Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/checkpoint/encoder_config.h"
#include "server/common/status.h"
#include "server/models/span_model.h"
#include "server/qa/span_scoring.h"
#include "server/qa/windows.h"
#include "server/service/window_job.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve {
class Engine;
}

namespace ropeserve::service {

struct QaRequest {
  std::string question;
  std::string context;
  // Several passages instead of `context` (non-empty: a multi-passage
  // question, answered with qa::SelectAnswersAcross; `context` unused).
  std::vector<std::string> passages;
  qa::WindowOptions windows;
  qa::QaOptions options;
  // The unit of the answers' start/end (into their context or passage).
  qa::OffsetUnit offset_unit = qa::OffsetUnit::kCodePoint;
};

struct QaResult {
  std::vector<qa::Answer> answers;
  std::int64_t tokens = 0;  // tokens of all windows
  std::int64_t windows = 0;
  std::optional<double> null_score;  // with handle_impossible_answer
};

struct QaServiceOptions {
  // The engine whose steps run the windows (it must outlive the service);
  // null: the service's own worker thread runs them.
  Engine* engine = nullptr;
  std::int64_t max_batch_tokens = 8192;  // per forward, without an engine
  std::int64_t max_queue_requests = 1024;
  std::size_t max_context_bytes = 1 << 20;  // longer contexts are refused
  std::size_t max_windows = 2048;           // windows one request (all its pairs) may need
  // Called with each answered call's latency in seconds (metrics); thread-safe.
  std::function<void(double)> on_latency;
  // Runs AnswerBatchAsync's answer selection off the thread that finished
  // the forward (the engine's); false = full, then it runs there. Unset:
  // inline.
  std::function<bool(std::function<void()>)> post;
};

// A request in flight (AnswerBatchAsync); Cancel() drops its remaining
// windows and completes it with Cancelled. Thread-safe.
using QaCall = EncoderCall;

class QaService {
 public:
  // Serves `model` with `tokenizer` (server/serving/service_factory.h loads
  // both from a checkpoint directory).
  static StatusOr<std::unique_ptr<QaService>> Create(std::unique_ptr<SpanModel> model,
                                                     std::shared_ptr<const tok::Tokenizer> tokenizer,
                                                     std::string served_name, QaServiceOptions options = {});
  ~QaService();

  const std::string& name() const { return name_; }
  // "qa-<n>", unique within the process.
  std::string NextRequestId() { return "qa-" + std::to_string(++counter_); }
  const EncoderConfig& config() const;
  // False when the tokenizer names no cls_token: the null answer (the CLS
  // slot) cannot be scored.
  bool scores_null_answer() const;
  // Windows the request, waits for its forwards and selects answers.
  // `timeout_seconds` > 0 bounds the wait (DeadlineExceeded).
  StatusOr<QaResult> Answer(const QaRequest& request, double timeout_seconds = 0);
  // Several pairs, packed together. `abandoned`, when set, is polled every
  // 200 ms while waiting: true cancels the call (a client that left).
  StatusOr<std::vector<QaResult>> AnswerBatch(const std::vector<QaRequest>& requests, double timeout_seconds = 0,
                                              bool (*abandoned)() = nullptr);
  // The same without blocking: windows are built on the calling thread (bad
  // input is an error here), then `done` runs exactly once, with the
  // results or the failure (deadline, cancel, engine stopped). It may run
  // on the engine's thread, the `post` executor, or (for a failure) the
  // calling thread: keep it short.
  using Done = std::function<void(StatusOr<std::vector<QaResult>>)>;
  StatusOr<std::shared_ptr<QaCall>> AnswerBatchAsync(std::vector<QaRequest> requests, double timeout_seconds,
                                                     Done done);

 private:
  QaService() = default;
  struct Prepared;
  StatusOr<std::shared_ptr<Prepared>> Prepare(std::vector<QaRequest> requests, double timeout_seconds) const;
  StatusOr<std::vector<QaResult>> Select(Prepared& p) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string name_;
  std::atomic<std::uint64_t> counter_{0};
};

}  // namespace ropeserve::service
