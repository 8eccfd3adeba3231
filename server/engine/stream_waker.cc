#include "server/engine/stream_waker.h"

#include <iterator>
#include <utility>

namespace ropeserve {

StreamWaker::StreamWaker() : thread_([this] { Loop(); }) {}

StreamWaker::~StreamWaker() {
  Flush();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void StreamWaker::Add(std::shared_ptr<RequestStream> stream) {
  if (!collected_.empty() && collected_.back() == stream) return;
  collected_.push_back(std::move(stream));
}

void StreamWaker::Flush() {
  if (collected_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (handed_.empty()) {
      handed_.swap(collected_);
    } else {  // the thread is still waking the previous hand-over
      handed_.insert(handed_.end(), std::make_move_iterator(collected_.begin()),
                     std::make_move_iterator(collected_.end()));
    }
  }
  collected_.clear();
  cv_.notify_one();
}

void StreamWaker::Loop() {
  std::vector<std::shared_ptr<RequestStream>> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !handed_.empty(); });
      if (handed_.empty()) return;  // stopping, and everything handed over was woken
      batch.swap(handed_);
    }
    for (const auto& s : batch) s->Wake();
    batch.clear();  // the streams are the readers' again
  }
}

}  // namespace ropeserve
