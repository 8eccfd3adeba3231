#include "server/common/json_text.h"

#include <charconv>

namespace ropeserve {

using json = nlohmann::json;

Status Malformed(const std::string& param, const std::string& message) {
  return MalformedRequest(message).WithParam(param);
}

StatusOr<std::int64_t> IntegerParam(const std::string& param, const std::string& value, std::int64_t lo,
                                    std::int64_t hi) {
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size() || n < lo || n > hi)
    return Malformed(param,
                     "'" + param + "' must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  return n;
}

StatusOr<bool> AscendingParam(const std::string& value) {
  if (value != "asc" && value != "desc") return Malformed("order", "'order' must be asc or desc");
  return value == "asc";
}

// Nesting depth of a JSON text, by scanning brackets outside strings.
Status CheckJsonDepth(const std::string& text) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return MalformedRequest("request body is nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::Ok();
}

StatusOr<nlohmann::ordered_json> ParseJsonObject(const std::string& text) {
  RS_RETURN_IF_ERROR(CheckJsonDepth(text));
  auto body = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return MalformedRequest("request body is not valid JSON (or not valid UTF-8)");
  if (!body.is_object()) return MalformedRequest("request body must be a JSON object");
  return body;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
std::string DumpOrdered(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace ropeserve
