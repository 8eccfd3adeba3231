#include "server/batch/batch_runner.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/common/random_id.h"

namespace ropeserve::batch {

using ojson = nlohmann::ordered_json;

BatchRunner::BatchRunner(BatchStore& store, LineExecutor executor, BatchRunnerOptions options)
    : store_(store), executor_(std::move(executor)), options_(std::move(options)) {
  if (options_.max_in_flight < 1) options_.max_in_flight = 1;
}

BatchRunner::~BatchRunner() { Stop(); }

void BatchRunner::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (coordinator_.joinable() || stopping_) return;
  for (int i = 0; i < options_.max_in_flight; ++i) workers_.emplace_back([this] { Worker(); });
  coordinator_ = std::thread([this] { Coordinate(); });
}

void BatchRunner::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();
    for (auto& [seq, b] : batches_) b.cancel->store(true);
  }
  wake_.notify_all();
  work_.notify_all();
  if (coordinator_.joinable()) coordinator_.join();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
  workers_.clear();
}

void BatchRunner::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  wake_.notify_all();
}

void BatchRunner::Coordinate() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    woken_ = false;
    lock.unlock();
    Pass();
    lock.lock();
    wake_.wait_for(lock, options_.poll, [this] { return stopping_ || woken_; });
  }
}

// One look at every batch that is not finished. Errors are logged and the
// next pass tries again (the database keeps the state).
void BatchRunner::Pass() {
  auto log = [](const char* what, const BatchInfo& b, const Status& s) {
    if (!s.ok()) spdlog::error("batch {}: {}: {}", b.id, what, s.ToString());
  };
  if (auto v = store_.InStatus("validating"); v.ok()) {
    for (const BatchInfo& b : *v) log("validating", b, store_.Validate(b, options_.check_body));
  }
  // A batch being cancelled or past its window: its queued lines dropped,
  // its running ones cancelled; finalized once none runs.
  auto wind_down = [&](const BatchInfo& b, const char* final_status) {
    bool idle = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Batch& st = batches_[b.seq];
      st.cancel->store(true);
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (it->line.batch_seq != b.seq) {
          ++it;
          continue;
        }
        it = queue_.erase(it);
        --st.in_flight;
      }
      idle = st.in_flight == 0;
      if (idle) batches_.erase(b.seq);
    }
    if (idle) log("finalizing", b, store_.Finalize(b, final_status));
  };
  if (auto c = store_.InStatus("cancelling"); c.ok()) {
    for (const BatchInfo& b : *c) wind_down(b, "cancelled");
  }
  if (auto f = store_.InStatus("finalizing"); f.ok()) {
    for (const BatchInfo& b : *f) log("finalizing", b, store_.Finalize(b, "completed"));
  }
  auto in_progress = store_.InStatus("in_progress");
  if (!in_progress.ok()) return;
  std::vector<BatchInfo> running;
  const std::int64_t now = store_.Now();
  for (BatchInfo& b : *in_progress) {
    if (now >= b.expires_at) {
      wind_down(b, "expired");
      continue;
    }
    bool idle;
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle = batches_[b.seq].in_flight == 0;
    }
    if (b.completed + b.failed >= b.total && idle) {
      Status s = store_.StartFinalizing(b);
      if (s.ok()) {
        b.status = "finalizing";
        s = store_.Finalize(b, "completed");
        std::lock_guard<std::mutex> lock(mu_);
        batches_.erase(b.seq);
      }
      log("finalizing", b, s);
      continue;
    }
    running.push_back(std::move(b));
  }
  Refill(running);
}

void BatchRunner::Refill(const std::vector<BatchInfo>& running) {
  // Queued plus running lines: the workers' number, and as many waiting
  // to follow at once.
  const auto target = static_cast<std::size_t>(2 * options_.max_in_flight);
  for (const BatchInfo& b : running) {
    std::int64_t cursor;
    std::size_t room;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const std::size_t outstanding = queue_.size() + static_cast<std::size_t>(running_.load());
      if (stopping_ || outstanding >= target) return;
      room = target - outstanding;
      cursor = batches_[b.seq].cursor;
    }
    auto lines = store_.PendingLines(b.seq, cursor, room);
    if (!lines.ok()) {
      spdlog::error("batch {}: reading its lines: {}", b.id, lines.status().ToString());
      continue;
    }
    if (lines->empty()) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      Batch& st = batches_[b.seq];
      for (PendingLine& l : *lines) {
        st.cursor = l.line;
        ++st.in_flight;
        LineRequest request{b.id, b.owner, b.endpoint, l.custom_id, l.body};
        queue_.push_back(Work{std::move(l), std::move(request), st.cancel});
      }
    }
    work_.notify_all();
  }
}

void BatchRunner::Worker() {
  for (;;) {
    Work w;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      w = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    Run(w);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
      if (auto it = batches_.find(w.line.batch_seq); it != batches_.end()) --it->second.in_flight;
      woken_ = true;
    }
    wake_.notify_all();
  }
}

void BatchRunner::Run(Work& w) {
  auto pause = [this] {
    std::unique_lock<std::mutex> lock(mu_);
    work_.wait_for(lock, options_.retry_after, [this] { return stopping_; });
    return !stopping_;
  };
  for (;;) {
    if (w.cancel->load()) return;
    LineOutcome outcome = executor_(w.request, *w.cancel);
    if (outcome.retry) {
      if (w.cancel->load() || !pause()) return;
      continue;
    }
    const std::string line = ResultLine(w, outcome);
    // A result that cannot be recorded (the disk is full) is kept and
    // recorded once it can be; stopping drops it, and the line runs again.
    for (;;) {
      auto recorded = store_.Record(w.line.batch_seq, w.line.line, outcome.status_code == 200, line);
      if (recorded.ok()) return;
      spdlog::error("batch {}: recording line {}: {}", w.request.batch_id, w.line.line + 1,
                    recorded.status().ToString());
      if (!pause()) return;
    }
  }
}

// The line of the output file (status 200) or of the error file (any
// other status), in OpenAI's shape.
std::string BatchRunner::ResultLine(const Work& w, const LineOutcome& outcome) const {
  ojson body = ojson::parse(outcome.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) body = outcome.body;
  std::string request_id = outcome.request_id;
  if (request_id.empty() && body.is_object() && body.contains("id") && body["id"].is_string())
    request_id = body["id"].get<std::string>();
  ojson response = {{"status_code", outcome.status_code},
                    {"request_id", request_id.empty() ? RandomId("req_", 12) : request_id},
                    {"body", std::move(body)}};
  return ojson{{"id", RandomId("batch_req_", 12)},
               {"custom_id", w.request.custom_id},
               {"response", std::move(response)},
               {"error", nullptr}}
      .dump();
}

}  // namespace ropeserve::batch
