#include "server/api/error_mapping.h"

#include <nlohmann/json.hpp>

namespace ropeserve::api {

namespace {
struct Row {
  ErrorCode code;
  int http;
  int grpc;          // grpc::StatusCode
  const char* type;  // OpenAI error "type"
};
constexpr Row kTable[] = {
    {ErrorCode::kOk, 200, 0, ""},
    // 400: the body does not parse or a field has the wrong type; 422: it
    // parses but a value cannot be served (out of range, beyond the context).
    {ErrorCode::kMalformedRequest, 400, 3, "invalid_request_error"},
    {ErrorCode::kInvalidArgument, 422, 3, "invalid_request_error"},
    {ErrorCode::kNotFound, 404, 5, "not_found_error"},
    {ErrorCode::kFailedPrecondition, 422, 9, "invalid_request_error"},
    {ErrorCode::kResourceExhausted, 429, 8, "overloaded_error"},
    {ErrorCode::kDeadlineExceeded, 504, 4, "timeout_error"},
    {ErrorCode::kCancelled, 499, 1, "cancelled"},
    {ErrorCode::kUnimplemented, 501, 12, "not_implemented_error"},
    {ErrorCode::kDataLoss, 500, 15, "internal_error"},
    {ErrorCode::kUnauthenticated, 401, 16, "authentication_error"},
    {ErrorCode::kUnavailable, 503, 14, "unavailable_error"},
    {ErrorCode::kInternal, 500, 13, "internal_error"},
};
const Row& Lookup(ErrorCode code) {
  for (const auto& r : kTable)
    if (r.code == code) return r;
  return kTable[sizeof(kTable) / sizeof(kTable[0]) - 1];
}
}  // namespace

int HttpStatusFor(ErrorCode code) { return Lookup(code).http; }
int GrpcCodeFor(ErrorCode code) { return Lookup(code).grpc; }

std::string ErrorJson(const Status& status, int http_status) {
  const Row& r = Lookup(status.code());
  nlohmann::json error = {{"message", status.message()},
                          {"type", r.type},
                          {"param", status.param().empty() ? nlohmann::json(nullptr) : nlohmann::json(status.param())},
                          {"code", http_status ? http_status : r.http}};
  return nlohmann::json{{"error", std::move(error)}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ropeserve::api
