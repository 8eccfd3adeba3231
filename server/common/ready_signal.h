// A flag set from any thread (typically a RequestStream's notify hook, on
// the engine's thread) and waited for by one reader: the mutex, condition
// variable and bool that every reader of several streams needs. Hold it in
// a shared_ptr when the setter may outlive the reader's scope.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace ropeserve {

class ReadySignal {
 public:
  void Set() {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = true;
    cv_.notify_all();
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = false;
  }
  bool IsSet() {
    std::lock_guard<std::mutex> lock(mu_);
    return ready_;
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return ready_; });
  }
  // True if set within `timeout`.
  template <typename Rep, typename Period>
  bool WaitFor(std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return ready_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false;
};

}  // namespace ropeserve
