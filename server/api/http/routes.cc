#include "server/api/http/routes.h"

#include <cctype>
#include <string_view>

namespace ropeserve::api {

namespace {

constexpr Route kRoutes[] = {
    {"/health", "GET", true, false},
    {"/ready", "GET", true, false},
    {"/metrics", "GET", true, false},
    {"/debug/kv-cache", "GET", true, true},  // with --kv-events-endpoint only
    {"/version", "GET", false, false},
    {"/openapi.json", "GET", false, false},
    {"/", "GET", false, false},  // the playground: static files (its API calls need the key)
    {"/playground/app.js", "GET", false, false},
    {"/playground/style.css", "GET", false, false},
    {"/v1/models", "GET", false, true},
    {"/v1/info", "GET", false, true},
    {"/v1/summarize", "POST", false, true},
    {"/v1/qa", "POST", false, true},
    {"/v1/embeddings", "POST", false, true},
    {"/embed", "POST", false, true},
    {"/classify", "POST", false, true},
    {"/v1/classify", "POST", false, true},
    {"/predict", "POST", false, true},
    {"/score", "POST", false, true},
    {"/v1/score", "POST", false, true},
    {"/rerank", "POST", false, true},
    {"/v1/rerank", "POST", false, true},
    {"/v2/rerank", "POST", false, true},
    {"/v1/token-classify", "POST", false, true},
    {"/v1/completions", "POST", false, true},
    {"/v1/chat/completions", "POST", false, true},
    {"/v1/completions/render", "POST", false, true, ApiDialect::kOpenAI, true},
    {"/v1/chat/completions/render", "POST", false, true, ApiDialect::kOpenAI, true},
    {"/v1/messages", "POST", false, true, ApiDialect::kAnthropic},
    {"/v1/messages/count_tokens", "POST", false, true, ApiDialect::kAnthropic},
    {"/v1/responses", "POST", false, true},
    {"/v1/responses/{response_id}", "GET", false, true},
    {"/v1/responses/{response_id}", "DELETE", false, true},
    {"/v1/responses/{response_id}/cancel", "POST", false, true},
    {"/v1/responses/{response_id}/input_items", "GET", false, true},
    {"/v1/files", "POST", false, true},
    {"/v1/files", "GET", false, true},
    {"/v1/files/{file_id}", "GET", false, true},
    {"/v1/files/{file_id}", "DELETE", false, true},
    {"/v1/files/{file_id}/content", "GET", false, true},
    {"/v1/batches", "POST", false, true},
    {"/v1/batches", "GET", false, true},
    {"/v1/batches/{batch_id}", "GET", false, true},
    {"/v1/batches/{batch_id}/cancel", "POST", false, true},
    {"/tokenize", "POST", false, true},
    {"/detokenize", "POST", false, true},
};

// A route's path matches `path` segment by segment; a "{...}" segment
// (an id) matches one segment of letters, digits, '_' and '-'. `id`
// receives it.
bool PathMatches(std::string_view pattern, std::string_view path, std::string* id) {
  while (!pattern.empty() && !path.empty()) {
    const std::size_t ps = pattern.find('/', 1), qs = path.find('/', 1);
    const std::string_view p = pattern.substr(0, ps), q = path.substr(0, qs);
    if (p.size() > 2 && p[1] == '{') {
      if (q.size() < 2 || q.size() > 201) return false;
      for (char c : q.substr(1))
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
      if (id != nullptr) *id = std::string(q.substr(1));
    } else if (p != q) {
      return false;
    }
    pattern = ps == std::string_view::npos ? std::string_view() : pattern.substr(ps);
    path = qs == std::string_view::npos ? std::string_view() : path.substr(qs);
  }
  return pattern.empty() && path.empty();
}

}  // namespace

const Route* FindRoute(const std::string& path, bool admin, const std::string& method, std::string* id) {
  const Route* found = nullptr;
  for (const auto& r : kRoutes) {
    if (!(r.admin || r.admin_open || !admin) || !PathMatches(r.path, path, id)) continue;
    if (method == r.method || (method == "HEAD" && std::string(r.method) == "GET")) return &r;
    if (found == nullptr) found = &r;
  }
  return found;
}

std::string AllowedMethods(const Route& route) {
  std::string allow;
  for (const auto& r : kRoutes)
    if (std::string_view(r.path) == route.path) allow += (allow.empty() ? "" : ", ") + std::string(r.method);
  return allow;
}

}  // namespace ropeserve::api
