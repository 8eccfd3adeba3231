// The REST routes: every endpoint with its method, whether it is on the
// admin port, whether it needs an API key, and its error dialect; a path
// with an {id} segment ({response_id}, {file_id}) matches any id. The HTTP server routes,
// authenticates, counts (the route's path is the metrics label) and
// answers 404 / 405 from this table.
#pragma once

#include <string>

#include "server/api/error_mapping.h"

namespace ropeserve::api {

// The endpoints and their methods; anything else on these paths is 405,
// other paths 404. The admin server has only the `admin` and `admin_open` ones; `auth` ones
// need an API key when keys are configured. docs/openapi.json describes
// every non-admin route (a test checks they agree).
struct Route {
  const char* path;
  const char* method;
  bool admin;
  bool auth;
  ApiDialect dialect = ApiDialect::kOpenAI;  // the shape of its error bodies
  // Also on the admin port, without a key there (vLLM's render endpoints,
  // for a router inside the cluster).
  bool admin_open = false;
};

// The route of `path` for `method` (HEAD: GET's); when the path has routes
// but none for the method, the first of them (the 405 names the methods).
// `id` (when given) receives the path's {id} segment. Null: no route.
const Route* FindRoute(const std::string& path, bool admin, const std::string& method = "", std::string* id = nullptr);
// Every method the routes of `route`'s path serve: "GET, DELETE".
std::string AllowedMethods(const Route& route);

}  // namespace ropeserve::api
