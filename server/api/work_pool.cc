#include "server/api/work_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

#include "server/common/exception_message.h"

namespace ropeserve::api {

WorkPool::WorkPool(int threads, std::size_t max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Run(); });
}

void WorkPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

bool WorkPool::TrySubmit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void WorkPool::Run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      spdlog::error("a request task failed: {}", ExceptionMessage(e));
    } catch (...) {
      spdlog::error("a request task failed with an unknown exception");
    }
  }
}

}  // namespace ropeserve::api
