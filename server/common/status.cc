#include "server/common/status.h"

namespace ropeserve {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "OK";
    case ErrorCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case ErrorCode::kNotFound:
      return "NOT_FOUND";
    case ErrorCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case ErrorCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case ErrorCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case ErrorCode::kCancelled:
      return "CANCELLED";
    case ErrorCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case ErrorCode::kDataLoss:
      return "DATA_LOSS";
    case ErrorCode::kInternal:
      return "INTERNAL";
    case ErrorCode::kMalformedRequest:
      return "INVALID_ARGUMENT";
    case ErrorCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    case ErrorCode::kUnavailable:
      return "UNAVAILABLE";
    case ErrorCode::kPayloadTooLarge:
      return "PAYLOAD_TOO_LARGE";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(ErrorCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  Status out(code_, context + ": " + message_);
  out.param_ = param_;
  out.reason_ = reason_;
  return out;
}

Status Status::WithParam(std::string param) const {
  Status out = *this;
  if (!ok()) out.param_ = std::move(param);
  return out;
}

Status Status::WithReason(std::string reason) const {
  Status out = *this;
  if (!ok()) out.reason_ = std::move(reason);
  return out;
}

}  // namespace ropeserve
