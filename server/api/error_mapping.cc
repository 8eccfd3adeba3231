#include "server/api/error_mapping.h"

#include <nlohmann/json.hpp>

namespace ropeserve::api {

namespace {
// OpenAI's error types (the `type` its SDKs and clients read) and, where
// the failure has one name whatever its cause, OpenAI's `code`; otherwise
// `code` is the Status's reason() or null. Invalid values are 400, as on
// OpenAI's API and vLLM (ropeserve answered 422 before 2026-12; docs/api.md).
struct Row {
  ErrorCode code;
  int http;
  int grpc;          // grpc::StatusCode
  const char* type;  // OpenAI error "type"
  const char* name;  // default OpenAI error "code" ("" = null)
};
constexpr Row kTable[] = {
    {ErrorCode::kOk, 200, 0, "", ""},
    {ErrorCode::kMalformedRequest, 400, 3, "invalid_request_error", ""},
    {ErrorCode::kInvalidArgument, 400, 3, "invalid_request_error", ""},
    {ErrorCode::kNotFound, 404, 5, "not_found_error", ""},
    {ErrorCode::kFailedPrecondition, 400, 9, "invalid_request_error", ""},
    {ErrorCode::kResourceExhausted, 429, 8, "rate_limit_error", "server_overloaded"},
    {ErrorCode::kDeadlineExceeded, 504, 4, "server_error", "timeout"},
    {ErrorCode::kCancelled, 499, 1, "invalid_request_error", "cancelled"},
    {ErrorCode::kUnimplemented, 501, 12, "invalid_request_error", "not_implemented"},
    {ErrorCode::kDataLoss, 500, 15, "server_error", ""},
    {ErrorCode::kUnauthenticated, 401, 16, "authentication_error", "invalid_api_key"},
    {ErrorCode::kUnavailable, 503, 14, "server_error", "service_unavailable"},
    {ErrorCode::kPayloadTooLarge, 413, 8, "invalid_request_error", "payload_too_large"},
    {ErrorCode::kInternal, 500, 13, "server_error", ""},
};
const Row& Lookup(ErrorCode code) {
  for (const auto& r : kTable)
    if (r.code == code) return r;
  return kTable[sizeof(kTable) / sizeof(kTable[0]) - 1];
}
}  // namespace

int HttpStatusFor(ErrorCode code) { return Lookup(code).http; }
int GrpcCodeFor(ErrorCode code) { return Lookup(code).grpc; }

const char* ErrorTypeFor(int http_status) {
  switch (http_status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    default:
      return http_status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string ErrorReason(const Status& status) {
  return status.reason().empty() ? Lookup(status.code()).name : status.reason();
}

std::string ErrorJson(const Status& status, int http_status) {
  const Row& r = Lookup(status.code());
  const int http = http_status ? http_status : r.http;
  const std::string name = ErrorReason(status);
  auto null_if_empty = [](const std::string& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v); };
  // A status the table does not give (405, 408, 413, 431) has the type of
  // its HTTP class.
  const char* type = http == r.http ? r.type : ErrorTypeFor(http);
  nlohmann::json error = {{"message", status.message()},
                          {"type", type},
                          {"param", null_if_empty(status.param())},
                          {"code", null_if_empty(http == r.http ? name : "")}};
  return nlohmann::json{{"error", std::move(error)}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string AnthropicErrorJson(const Status& status, int http_status) {
  const int http = http_status ? http_status : Lookup(status.code()).http;
  const char* type = "api_error";
  switch (http) {
    case 400:
    case 405:
    case 408:
    case 431:
    case 499:
    case 501:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
      type = "overloaded_error";
      break;
    case 504:
      type = "timeout_error";
      break;
    default:
      break;
  }
  // Anthropic names the field in the message, as a dotted path.
  std::string message = status.message();
  if (!status.param().empty()) {
    std::string path;
    for (char c : status.param()) {
      if (c == '[') {
        path += '.';
      } else if (c != ']') {
        path += c;
      }
    }
    message = path + ": " + message;
  }
  nlohmann::json body = {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ErrorBody(ApiDialect dialect, const Status& status, int http_status) {
  return dialect == ApiDialect::kAnthropic ? AnthropicErrorJson(status, http_status) : ErrorJson(status, http_status);
}

}  // namespace ropeserve::api
