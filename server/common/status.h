// One error type for the whole server. Every failure that can be caused by
// input from outside (files, flags, requests) is reported as a Status value;
// asserts and TORCH_CHECK are for internal invariants only.
//
// The codes follow gRPC's canonical codes so that one table (in the API
// layer) can translate them to HTTP and gRPC statuses.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace ropeserve {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,     // invalid flag, file contents, or a well-formed request with invalid values
  kMalformedRequest,    // a request that does not parse or has fields of the wrong type
  kNotFound,            // a file, model or tensor that should exist does not
  kFailedPrecondition,  // valid input the current configuration cannot serve
  kResourceExhausted,   // overloaded / does not fit
  kDeadlineExceeded,
  kCancelled,
  kUnimplemented,  // recognised but unsupported (e.g. an architecture)
  kDataLoss,       // truncated or corrupt file
  kInternal,
  kUnauthenticated,  // missing or wrong API key
  kUnavailable,      // not ready, or draining for shutdown
  kPayloadTooLarge,  // an input over a documented size limit (HTTP 413)
};

const char* ErrorCodeName(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message"
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context + ": "`.
  Status WithContext(const std::string& context) const;

  // The request field an error is about ("max_tokens", "messages[2].content"),
  // reported as OpenAI's error `param`; empty when none.
  const std::string& param() const { return param_; }
  Status WithParam(std::string param) const;
  // A machine-readable reason, reported as OpenAI's error `code`
  // ("context_length_exceeded", "model_not_found"); empty = the transport's
  // default for the error code (server/api/error_mapping.cc).
  const std::string& reason() const { return reason_; }
  Status WithReason(std::string reason) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
  std::string param_;
  std::string reason_;
};

inline Status InvalidArgument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {ErrorCode::kDataLoss, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {ErrorCode::kUnimplemented, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {ErrorCode::kFailedPrecondition, std::move(m)}; }
inline Status Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }
inline Status MalformedRequest(std::string m) { return {ErrorCode::kMalformedRequest, std::move(m)}; }
inline Status Unavailable(std::string m) { return {ErrorCode::kUnavailable, std::move(m)}; }
inline Status PayloadTooLarge(std::string m) { return {ErrorCode::kPayloadTooLarge, std::move(m)}; }
inline Status Unauthenticated(std::string m) { return {ErrorCode::kUnauthenticated, std::move(m)}; }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "StatusOr needs an error status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ropeserve

#define RS_CONCAT_INNER(a, b) a##b
#define RS_CONCAT(a, b) RS_CONCAT_INNER(a, b)

// Returns early from a function returning Status / StatusOr on error.
#define RS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::ropeserve::Status rs_status_ = (expr); \
    if (!rs_status_.ok()) return rs_status_; \
  } while (0)

#define RS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

// RS_ASSIGN_OR_RETURN(auto x, MakeX());
#define RS_ASSIGN_OR_RETURN(lhs, expr) RS_ASSIGN_OR_RETURN_IMPL(RS_CONCAT(rs_statusor_, __LINE__), lhs, expr)
