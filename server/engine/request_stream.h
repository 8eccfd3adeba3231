// A request's output channel: the engine thread writes tokens, the end and
// the admission verdict; one API thread reads. Torch-free.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "server/common/status.h"
#include "server/common/token_id.h"
#include "server/engine/types.h"

namespace ropeserve {

using Clock = std::chrono::steady_clock;

struct GeneratedToken {
  TokenId id = 0;
  double logprob = 0;
  std::vector<std::pair<TokenId, double>> top_logprobs;
  // Prompt logprobs only: 1 + how many tokens the model found likelier
  // (vLLM's rank); 0 when not computed.
  std::int64_t rank = 0;
};

// What a reader gets: tokens since the previous read, and the end of the
// request when it came.
struct StreamChunk {
  // Logprobs of prompt tokens 1, 2, ... (requests that asked; they all come
  // before the first generated token).
  std::vector<GeneratedToken> prompt_logprobs;
  std::vector<GeneratedToken> tokens;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kStop;  // when finished
  Status error;                                      // kError and kRejected: why
  std::int64_t prompt_tokens = 0;
  std::int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
};

class RequestStream {
 public:
  explicit RequestStream(RequestId id) : id_(id) {}
  RequestId id() const { return id_; }

  // Waits until there is something new (or `timeout` passes) and takes it.
  StreamChunk Next(std::optional<Clock::duration> timeout = std::nullopt);

  // Waits for the engine's admission verdict: Ok once the request was
  // admitted (it may have finished since), the reason when it was refused.
  // Submit never waits; callers that must answer a refusal before anything
  // else (an HTTP status) wait here.
  Status WaitAdmission();

  // `fn` runs (on the engine's thread or its StreamWaker's, without the
  // stream's lock) after every Push and Finish, and at once (on the
  // caller's thread) if output is already waiting and `call_if_ready`:
  // readers that must not block (gRPC reactors, multiplexed streams) wait
  // for it and then call Next(zero).
  // Keep it short and thread-safe.
  void SetNotify(std::function<void()> fn, bool call_if_ready = true);

  // Engine side. Push, PushPrompt and Finish wake the reader (Wake) unless
  // `wake` is false: the engine's thread then leaves that to its
  // StreamWaker (stream_waker.h), which calls Wake after the step.
  void Admit();
  void Push(GeneratedToken token, bool wake = true);
  void PushPrompt(std::vector<GeneratedToken> logprobs, bool wake = true);
  void Finish(FinishReason reason, std::int64_t prompt_tokens, std::int64_t cached_tokens, Status error = Status::Ok(),
              bool wake = true);
  // Wakes a reader waiting in Next and runs the notify callback.
  void Wake();
  // What the notify callback threw since the last call (Ok if nothing):
  // the engine fails the request instead of dying (at the request's next
  // token when the StreamWaker ran the callback).
  Status TakeNotifyError();

 private:
  void Notify(const std::function<void()>& fn);
  bool Ready() const {
    return !pending_.tokens.empty() || !pending_.prompt_logprobs.empty() || (pending_.finished && !delivered_finish_);
  }

  RequestId id_;
  std::mutex mu_;
  std::condition_variable cv_;
  StreamChunk pending_;
  bool delivered_finish_ = false;
  enum class Admission { kPending, kAdmitted, kRejected } admission_ = Admission::kPending;
  std::function<void()> notify_;
  Status notify_error_;
};

}  // namespace ropeserve
