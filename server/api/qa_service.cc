#include "server/api/qa_service.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

#include "server/api/metrics.h"
#include "server/models/encoder.h"

namespace ropeserve::api {

namespace {

// One request's windows on their way through the worker.
struct Job {
  std::vector<std::vector<std::uint32_t>> windows;
  std::vector<std::vector<std::uint32_t>> type_ids;
  std::vector<SpanLogits> logits;
  std::size_t next = 0;  // first window not yet taken by the worker
  std::size_t done = 0;
  bool cancelled = false;
  Status error;
};

}  // namespace

struct QaService::Impl {
  std::unique_ptr<EncoderQaModel> model;
  std::shared_ptr<const tok::Tokenizer> tokenizer;
  QaServiceOptions options;
  std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::deque<std::shared_ptr<Job>> queue;
  bool stop = false;
  std::thread worker;

  void Loop() {
    for (;;) {
      // Take windows in arrival order until the token budget is used (at
      // least one window per forward).
      std::vector<std::pair<std::shared_ptr<Job>, std::size_t>> batch;
      {
        std::unique_lock<std::mutex> lock(mu);
        work_cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (stop) return;
        std::int64_t tokens = 0;
        while (!queue.empty()) {
          auto& job = queue.front();
          if (job->cancelled || job->next == job->windows.size()) {
            queue.pop_front();
            continue;
          }
          const auto n = static_cast<std::int64_t>(job->windows[job->next].size());
          if (!batch.empty() && tokens + n > options.max_batch_tokens) break;
          batch.emplace_back(job, job->next++);
          tokens += n;
        }
      }
      if (batch.empty()) continue;
      std::vector<std::vector<std::uint32_t>> inputs, types;
      for (auto& [job, k] : batch) {
        inputs.push_back(job->windows[k]);
        types.push_back(job->type_ids[k]);
      }
      auto out = model->ForwardPacked(inputs, types);
      {
        std::lock_guard<std::mutex> lock(mu);
        for (std::size_t b = 0; b < batch.size(); ++b) {
          auto& [job, k] = batch[b];
          if (out.ok()) {
            job->logits[k] = std::move((*out)[b]);
          } else if (job->error.ok()) {
            job->error = out.status();
          }
          ++job->done;
        }
      }
      done_cv.notify_all();
    }
  }
};

QaService::~QaService() {
  if (impl_) {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->stop = true;
    }
    impl_->work_cv.notify_all();
    if (impl_->worker.joinable()) impl_->worker.join();
  }
}

StatusOr<std::unique_ptr<QaService>> QaService::Create(const std::string& dir, std::string served_name,
                                                       QaServiceOptions options) {
  std::unique_ptr<QaService> s(new QaService());
  s->impl_ = std::make_unique<Impl>();
  s->name_ = std::move(served_name);
  s->impl_->options = options;
  if (options.max_batch_tokens < 1) return InvalidArgument("the QA batch budget must be positive");
  RS_ASSIGN_OR_RETURN(s->impl_->model, EncoderQaModel::Load(dir));
  if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
    return NotFound(dir + ": a QA model needs its tokenizer.json");
  RS_ASSIGN_OR_RETURN(s->impl_->tokenizer, tok::Tokenizer::FromPath(dir));
  if (!s->impl_->tokenizer->config().cls_token)
    spdlog::warn("QA tokenizer in {} names no cls_token: the null answer cannot be scored", dir);
  Impl* impl = s->impl_.get();
  impl->worker = std::thread([impl] { impl->Loop(); });
  return s;
}

const EncoderConfig& QaService::config() const { return impl_->model->config(); }

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
    RS_ASSIGN_OR_RETURN(auto w, qa::BuildWindows(*impl_->tokenizer, r.question, r.context, r.windows));
    windows.push_back(std::move(w));
  }
  auto job = std::make_shared<Job>();
  for (const auto& ws : windows)
    for (const auto& w : ws) {
      job->windows.push_back(w.ids);
      job->type_ids.push_back(w.type_ids);
    }
  job->logits.resize(job->windows.size());
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (static_cast<std::int64_t>(impl_->queue.size()) >= impl_->options.max_queue_requests)
      return Status(ErrorCode::kResourceExhausted, "the QA queue is full; retry later");
    impl_->queue.push_back(job);
  }
  impl_->work_cv.notify_all();
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    auto finished = [&] { return job->done == job->windows.size(); };
    if (timeout_seconds > 0) {
      if (!impl_->done_cv.wait_for(lock, std::chrono::duration<double>(timeout_seconds), finished)) {
        job->cancelled = true;
        return Status(ErrorCode::kDeadlineExceeded, "the QA request timed out");
      }
    } else {
      impl_->done_cv.wait(lock, finished);
    }
    if (!job->error.ok()) return job->error;
  }
  std::vector<QaResult> out;
  std::size_t k = 0;
  for (std::size_t r = 0; r < requests.size(); ++r) {
    std::vector<qa::QaWindow> scored;
    QaResult result;
    for (auto& w : windows[r]) {
      qa::QaWindow q = std::move(w.window);
      q.start_logits = std::move(job->logits[k].start);
      q.end_logits = std::move(job->logits[k].end);
      result.tokens += static_cast<std::int64_t>(q.start_logits.size());
      ++k;
      scored.push_back(std::move(q));
    }
    result.windows = static_cast<std::int64_t>(scored.size());
    RS_ASSIGN_OR_RETURN(result.answers, qa::SelectAnswers(scored, requests[r].context, requests[r].options));
    out.push_back(std::move(result));
  }
  if (impl_->options.metrics != nullptr)
    impl_->options.metrics->ObserveQaLatency(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return out;
}

}  // namespace ropeserve::api
