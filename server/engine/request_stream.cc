#include "server/engine/request_stream.h"

#include <exception>
#include <string>

#include "server/common/exception_message.h"

namespace ropeserve {

StreamChunk RequestStream::Next(std::optional<Clock::duration> timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return Ready(); };
  if (timeout) {
    cv_.wait_for(lock, *timeout, ready);
  } else {
    cv_.wait(lock, ready);
  }
  StreamChunk out;
  out.tokens.swap(pending_.tokens);
  out.prompt_logprobs.swap(pending_.prompt_logprobs);
  if (pending_.finished && !delivered_finish_) {
    out.finished = true;
    out.finish_reason = pending_.finish_reason;
    out.error = pending_.error;
    out.prompt_tokens = pending_.prompt_tokens;
    out.cached_tokens = pending_.cached_tokens;
    delivered_finish_ = true;
  }
  return out;
}

Status RequestStream::WaitAdmission() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return admission_ != Admission::kPending; });
  return admission_ == Admission::kRejected ? pending_.error : Status::Ok();
}

void RequestStream::SetNotify(std::function<void()> fn, bool call_if_ready) {
  bool ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notify_ = fn;
    ready = Ready();
  }
  if (ready && fn && call_if_ready) Notify(fn);
}

void RequestStream::Admit() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    admission_ = Admission::kAdmitted;
  }
  cv_.notify_all();
}

void RequestStream::Push(GeneratedToken token, bool wake) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.tokens.push_back(std::move(token));
  }
  if (wake) Wake();
}

void RequestStream::PushPrompt(std::vector<GeneratedToken> logprobs, bool wake) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& g : logprobs) pending_.prompt_logprobs.push_back(std::move(g));
  }
  if (wake) Wake();
}

void RequestStream::Finish(FinishReason reason, std::int64_t prompt_tokens, std::int64_t cached_tokens, Status error,
                           bool wake) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.finished = true;
    pending_.finish_reason = reason;
    pending_.prompt_tokens = prompt_tokens;
    pending_.cached_tokens = cached_tokens;
    pending_.error = std::move(error);
    if (admission_ == Admission::kPending)
      admission_ = reason == FinishReason::kRejected ? Admission::kRejected : Admission::kAdmitted;
  }
  if (wake) Wake();
}

void RequestStream::Wake() {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) Notify(notify);
}

void RequestStream::Notify(const std::function<void()>& fn) {
  // A reader's callback that throws must not take the engine thread down;
  // the reader still finds its output through Next().
  try {
    fn();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    notify_error_ = Internal(std::string("a stream callback failed: ") + ExceptionMessage(e));
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    notify_error_ = Internal("a stream callback failed: unknown exception");
  }
}

Status RequestStream::TakeNotifyError() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(notify_error_, Status::Ok());
}

}  // namespace ropeserve
