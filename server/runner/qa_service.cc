#include "server/runner/qa_service.h"

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "server/engine/engine.h"
#include "server/engine/encoder_queue.h"
#include "server/models/encoder.h"

namespace ropeserve {

namespace {

// One call's windows (one or several requests), as an encoder job.
class QaJob : public EncoderJob {
 public:
  std::vector<std::vector<std::uint32_t>> windows;
  std::vector<std::vector<std::uint32_t>> type_ids;

  std::size_t num_windows() const override { return windows.size(); }
  std::int64_t window_tokens(std::size_t w) const override { return static_cast<std::int64_t>(windows[w].size()); }
  bool cancelled() const override { return cancelled_; }
  void Fail(const Status& status) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (error_.ok()) error_ = status;
      failed_ = true;
    }
    cv_.notify_all();
  }
  void Deliver(std::size_t w, StatusOr<SpanLogits> result) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (result.ok()) {
        logits_[w] = std::move(*result);
      } else if (error_.ok()) {
        error_ = result.status();
      }
      ++done_;
    }
    cv_.notify_all();
  }
  void Prepare() { logits_.resize(windows.size()); }
  // Waits for every window (or a failure); DeadlineExceeded after `timeout_seconds` > 0.
  Status Wait(double timeout_seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    auto finished = [&] { return failed_ || done_ == windows.size(); };
    if (timeout_seconds > 0) {
      if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds), finished)) {
        cancelled_ = true;  // the queue drops its remaining windows
        return Status(ErrorCode::kDeadlineExceeded, "the QA request timed out");
      }
    } else {
      cv_.wait(lock, finished);
    }
    return error_;
  }
  SpanLogits& logits(std::size_t w) { return logits_[w]; }

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SpanLogits> logits_;
  std::size_t done_ = 0;
  bool failed_ = false;
  Status error_;
};

// Runs queued windows through the span model, packed into one forward.
class QaRunner : public EncoderRunner {
 public:
  explicit QaRunner(const EncoderQaModel& model) : model_(model) {}
  void Run(std::span<const EncoderItem> items) override {
    std::vector<std::vector<std::uint32_t>> inputs, types;
    for (const auto& it : items) {
      auto& job = static_cast<QaJob&>(*it.job);
      inputs.push_back(job.windows[it.window]);
      types.push_back(job.type_ids[it.window]);
    }
    auto out = model_.ForwardWindows(inputs, types);
    for (std::size_t b = 0; b < items.size(); ++b) {
      auto& job = static_cast<QaJob&>(*items[b].job);
      job.Deliver(items[b].window, out.ok() ? StatusOr<SpanLogits>(std::move((*out)[b])) : out.status());
    }
  }

 private:
  const EncoderQaModel& model_;
};

}  // namespace

struct QaService::Impl {
  std::unique_ptr<EncoderQaModel> model;
  std::shared_ptr<const tok::Tokenizer> tokenizer;
  QaServiceOptions options;
  std::unique_ptr<EncoderQueue> queue;
  std::unique_ptr<QaRunner> runner;
  std::atomic<bool> stop{false};
  std::thread worker;  // only without an engine
};

QaService::~QaService() {
  if (!impl_) return;
  if (impl_->options.engine != nullptr && impl_->queue) impl_->options.engine->AttachEncoder(nullptr, nullptr);
  impl_->stop = true;
  if (impl_->queue) impl_->queue->Wake();
  if (impl_->worker.joinable()) impl_->worker.join();
  if (impl_->queue) impl_->queue->Close(Status(ErrorCode::kUnavailable, "the QA service stopped"));
}

StatusOr<std::unique_ptr<QaService>> QaService::Create(const std::string& dir, std::string served_name,
                                                       QaServiceOptions options) {
  std::unique_ptr<QaService> s(new QaService());
  s->impl_ = std::make_unique<Impl>();
  s->name_ = std::move(served_name);
  s->impl_->options = options;
  if (options.max_batch_tokens < 1) return InvalidArgument("the QA batch budget must be positive");
  if (options.max_queue_requests < 1) return InvalidArgument("the QA queue must hold at least one request");
  RS_ASSIGN_OR_RETURN(s->impl_->model, EncoderQaModel::Load(dir, options.dtype));
  if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
    return NotFound(dir + ": a QA model needs its tokenizer.json");
  RS_ASSIGN_OR_RETURN(s->impl_->tokenizer, tok::Tokenizer::FromPath(dir));
  Impl* impl = s->impl_.get();
  impl->queue = std::make_unique<EncoderQueue>(static_cast<std::size_t>(options.max_queue_requests));
  impl->runner = std::make_unique<QaRunner>(*impl->model);
  if (options.engine != nullptr) {
    options.engine->AttachEncoder(impl->queue.get(), impl->runner.get());
  } else {
    impl->worker = std::thread([impl] {
      RunEncoderWorker(*impl->queue, *impl->runner, impl->options.max_batch_tokens, [impl] { return impl->stop.load(); });
    });
  }
  return s;
}

const EncoderConfig& QaService::config() const { return impl_->model->config(); }

bool QaService::scores_null_answer() const { return impl_->tokenizer->config().cls_token.has_value(); }

StatusOr<QaResult> QaService::Answer(const QaRequest& request, double timeout_seconds) {
  RS_ASSIGN_OR_RETURN(auto results, AnswerBatch({request}, timeout_seconds));
  return std::move(results[0]);
}

StatusOr<std::vector<QaResult>> QaService::AnswerBatch(const std::vector<QaRequest>& requests, double timeout_seconds) {
  const auto start = std::chrono::steady_clock::now();
  const EncoderConfig& c = config();
  // Windows first (in the caller's thread), so bad input fails before queueing.
  std::vector<std::vector<qa::WindowInput>> windows;
  for (const QaRequest& r : requests) {
    if (r.windows.max_seq_len > c.max_position_embeddings)
      return InvalidArgument("max_seq_len " + std::to_string(r.windows.max_seq_len) +
                             " exceeds the QA model's max_position_embeddings " +
                             std::to_string(c.max_position_embeddings));
    if (r.options.max_answer_len > r.windows.max_seq_len) return InvalidArgument("max_answer_len exceeds max_seq_len");
    qa::WindowOptions wo = r.windows;
    wo.max_context_bytes = impl_->options.max_context_bytes;
    RS_ASSIGN_OR_RETURN(auto w, qa::BuildWindows(*impl_->tokenizer, r.question, r.context, wo));
    windows.push_back(std::move(w));
  }
  auto job = std::make_shared<QaJob>();
  for (auto& ws : windows)
    for (auto& w : ws) {  // only w.window is needed after this
      job->windows.push_back(std::move(w.ids));
      job->type_ids.push_back(std::move(w.type_ids));
    }
  job->Prepare();
  RS_RETURN_IF_ERROR(impl_->queue->Push(job));
  RS_RETURN_IF_ERROR(job->Wait(timeout_seconds));
  std::vector<QaResult> out;
  std::size_t k = 0;
  for (std::size_t r = 0; r < requests.size(); ++r) {
    std::vector<qa::QaWindow> scored;
    QaResult result;
    for (auto& w : windows[r]) {
      qa::QaWindow q = std::move(w.window);
      q.start_logits = std::move(job->logits(k).start);
      q.end_logits = std::move(job->logits(k).end);
      result.tokens += static_cast<std::int64_t>(q.start_logits.size());
      ++k;
      scored.push_back(std::move(q));
    }
    result.windows = static_cast<std::int64_t>(scored.size());
    RS_ASSIGN_OR_RETURN(result.answers, qa::SelectAnswers(scored, requests[r].context, requests[r].options));
    out.push_back(std::move(result));
  }
  if (impl_->options.on_latency)
    impl_->options.on_latency(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return out;
}

}  // namespace ropeserve
