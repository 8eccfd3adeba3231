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

}  // namespace ropeserve::api
