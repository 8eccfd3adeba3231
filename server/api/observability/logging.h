// Log output for `serve`: human-readable text (spdlog's default) or one JSON
// object per line ({"time","level","msg", ...}) for log collectors.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "server/common/status.h"

namespace ropeserve::api {

// "text" or "json"; applies to every spdlog logger.
Status ConfigureLogging(const std::string& format);

// The request id of a call: the client's x-request-id when it is a sane
// token (1-128 characters of [A-Za-z0-9._:-]), else 32 fresh hex digits.
// REST and gRPC both use it, so ids look the same on both.
std::string RequestIdOrNew(const std::string& given);

// One access-log line per request. In JSON mode the fields become members
// of the line's object; in text mode "k=v" pairs after `message`.
void LogAccess(const std::string& message, const nlohmann::ordered_json& fields);

}  // namespace ropeserve::api
