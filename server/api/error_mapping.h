// The one table from ErrorCode to transport status codes. Every API layer
// (REST now, gRPC later) translates through here, so a given failure has the
// same meaning on every transport.
#pragma once

#include <string>

#include "server/common/status.h"

namespace ropeserve::api {

int HttpStatusFor(ErrorCode code);
// A grpc::StatusCode value (an int here so this header needs no gRPC).
int GrpcCodeFor(ErrorCode code);

// OpenAI's error type for an HTTP status ("invalid_request_error",
// "authentication_error", "not_found_error", "rate_limit_error",
// "server_error", ...).
const char* ErrorTypeFor(int http_status);

// The machine-readable name of an error: status.reason(), else the table's
// name for its code ("invalid_api_key", "timeout", ...), else "".
std::string ErrorReason(const Status& status);

// OpenAI's error body: {"error":{"message","type","param","code"}};
// `param` is the field the error is about (null if none), `code` a string
// naming the failure ("context_length_exceeded", "model_not_found",
// "invalid_api_key", ...) or null. `http_status` overrides the table's
// status (405, 408, 413, 431 come from the HTTP layer).
std::string ErrorJson(const Status& status, int http_status = 0);

// Anthropic's error body, on the Messages API's routes:
// {"type":"error","error":{"type","message"}} with Anthropic's types
// (invalid_request_error, authentication_error, permission_error,
// not_found_error, request_too_large, rate_limit_error, timeout_error,
// api_error, overloaded_error). The field an error is about is named in the
// message ("messages.0.content: ..."), as Anthropic's API does.
std::string AnthropicErrorJson(const Status& status, int http_status = 0);

// The error bodies of the API families a route speaks.
enum class ApiDialect { kOpenAI, kAnthropic };
std::string ErrorBody(ApiDialect dialect, const Status& status, int http_status = 0);

}  // namespace ropeserve::api
