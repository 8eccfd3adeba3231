// The REST API's OpenAPI 3.1 description (docs/openapi.json, compiled into
// the binary by CMake), served at GET /openapi.json.
#pragma once

#include <string>

namespace ropeserve::api {

const std::string& OpenApiDocument();

}  // namespace ropeserve::api
