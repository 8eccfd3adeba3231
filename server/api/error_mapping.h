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

// OpenAI-style error body: {"error":{"message","type","param","code"}};
// `param` is the field the error is about (null if none), `code` the HTTP
// status (`http_status`, or the one the table gives).
std::string ErrorJson(const Status& status, int http_status = 0);

}  // namespace ropeserve::api
