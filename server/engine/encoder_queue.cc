#include "server/engine/encoder_queue.h"

#include <chrono>
#include <exception>
#include <string>

#include "server/common/exception_message.h"

namespace ropeserve {

Status EncoderQueue::Push(std::shared_ptr<EncoderJob> job) {
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return close_status_;
    if (jobs_.size() >= max_jobs_) return Status(ErrorCode::kResourceExhausted, "the QA queue is full; retry later");
    if (job->num_windows() == 0) return InvalidArgument("an encoder job needs at least one window");
    jobs_.push_back(Entry{std::move(job), 0});
    wake = wake_;
  }
  cv_.notify_all();
  if (wake) wake();
  return Status::Ok();
}

std::vector<EncoderItem> EncoderQueue::Take(std::int64_t budget, bool at_least_one) {
  std::vector<EncoderItem> items;
  std::vector<std::shared_ptr<EncoderJob>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    DropCancelledLocked(dropped);
    std::int64_t tokens = 0;
    while (!jobs_.empty()) {
      Entry& e = jobs_.front();
      if (e.next == e.job->num_windows()) {
        jobs_.pop_front();
        continue;
      }
      const std::int64_t n = e.job->window_tokens(e.next);
      if ((!items.empty() || !at_least_one) && tokens + n > budget) break;
      items.push_back(EncoderItem{e.job, e.next++});
      tokens += n;
    }
  }
  // Outside the lock: a job's failure may run its caller's callback.
  for (auto& job : dropped) job->Fail(Status(ErrorCode::kCancelled, "the request was cancelled"));
  return items;
}

void EncoderQueue::DropCancelledLocked(std::vector<std::shared_ptr<EncoderJob>>& dropped) {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->job->cancelled()) {
      dropped.push_back(std::move(it->job));
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

std::int64_t EncoderQueue::PendingLocked() const {
  std::int64_t n = 0;
  for (const Entry& e : jobs_) {
    if (e.job->cancelled()) continue;
    for (std::size_t w = e.next; w < e.job->num_windows(); ++w) n += e.job->window_tokens(w);
  }
  return n;
}

std::int64_t EncoderQueue::pending_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return PendingLocked();
}

void EncoderQueue::SetWake(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(mu_);
  wake_ = std::move(wake);
}

void EncoderQueue::Close(const Status& status) {
  std::deque<Entry> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    close_status_ = status;
    left.swap(jobs_);
  }
  for (Entry& e : left) e.job->Fail(status);
  cv_.notify_all();
}

std::vector<EncoderItem> EncoderQueue::WaitAndTake(std::int64_t budget, const std::function<bool()>& stop) {
  {
    // Wakes now and then even without work, so that Take drops jobs whose
    // deadline passed while nothing ran.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop() || PendingLocked() > 0; });
    if (stop()) return {};
  }
  return Take(budget);
}

void EncoderQueue::Wake() {
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

void RunEncoderWorker(EncoderQueue& queue, EncoderRunner& runner, std::int64_t budget,
                      const std::function<bool()>& stop) {
  for (;;) {
    std::vector<EncoderItem> items = queue.WaitAndTake(budget, stop);
    if (stop()) return;
    if (items.empty()) continue;
    // As in the engine: an exception fails these windows' jobs, not the thread.
    Status failed;
    try {
      runner.Run(items);
    } catch (const std::exception& e) {
      failed = Internal(std::string("the encoder forward failed: ") + ExceptionMessage(e));
    } catch (...) {
      failed = Internal("the encoder forward failed: unknown exception");
    }
    if (!failed.ok())
      for (const auto& it : items) it.job->Fail(failed);
  }
}

}  // namespace ropeserve
