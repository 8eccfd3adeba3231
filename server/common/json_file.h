// Reading a JSON object from a file, with errors that name the file.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "server/common/status.h"

namespace ropeserve {

// The file's bytes; NotFound ("<path>: cannot open") if it cannot be read.
StatusOr<std::string> ReadTextFile(const std::string& path);

// NotFound if the file cannot be opened; InvalidArgument if it is not valid
// JSON or its top level is not an object.
StatusOr<nlohmann::json> ReadJsonObjectFile(const std::string& path);

}  // namespace ropeserve
