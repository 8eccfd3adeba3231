// The engine's vocabulary types, shared by the scheduler, the step plan, the
// request streams and the layers above: a request's id and why it ended.
// Torch-free.
#pragma once

#include <cstdint>

namespace ropeserve {

using RequestId = std::uint64_t;

// Why a request ended. Strings for clients ("stop", "length") are made in
// the API layer only.
enum class FinishReason {
  kStop,       // EOS, a stop token id, or a stop string
  kLength,     // max_tokens
  kCancelled,  // the client cancelled or went away
  kDeadline,   // its deadline passed
  kRejected,   // refused at admission (queue full, can never run)
  kError,      // a forward failed (an exception, a device error)
};
// "stop", "length", "cancelled", "deadline", "rejected", "error" (metric
// labels, span attributes).
const char* FinishReasonName(FinishReason reason);

}  // namespace ropeserve
