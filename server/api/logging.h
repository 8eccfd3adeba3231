// Log output for `serve`: human-readable text (spdlog's default) or one JSON
// object per line ({"time","level","msg", ...}) for log collectors.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/common/status.h"

namespace ropeserve::api {

// "text" or "json"; applies to every spdlog logger.
Status ConfigureLogging(const std::string& format);

// One access-log line per request. In JSON mode the fields become members
// of the line's object; in text mode "k=v" pairs after `message`.
void LogAccess(const std::string& message, const nlohmann::ordered_json& fields);

}  // namespace ropeserve::api
