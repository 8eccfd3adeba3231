#include "server/engine/types.h"

namespace ropeserve {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kDeadline:
      return "deadline";
    case FinishReason::kRejected:
      return "rejected";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

}  // namespace ropeserve
