// The REST API's OpenAPI 3.1 description (docs/openapi.json, compiled into
// the binary by CMake), served at GET /openapi.json.
#pragma once

#include <string>

namespace ropeserve::api {

const std::string& OpenApiDocument();

// The web playground (server/api/http/playground/, compiled in the same way),
// served at GET / and /playground/{app.js,style.css}.
const std::string& PlaygroundHtml();
const std::string& PlaygroundJs();
const std::string& PlaygroundCss();

}  // namespace ropeserve::api
