// Reading request bodies for the REST endpoints: JSON that is not JSON,
// not UTF-8, too deeply nested, or has fields of the wrong type is a
// malformed request (400) naming the problem.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "server/common/status.h"

namespace ropeserve::api {

// Bodies nested deeper than this are refused before parsing, so that no
// later recursive walk (templates, serialisation) can exhaust the stack.
constexpr int kMaxJsonDepth = 64;

// A JSON object, or MalformedRequest.
StatusOr<nlohmann::json> ParseBody(const std::string& text);

// Compact JSON text; invalid UTF-8 in strings is replaced, never thrown on.
std::string Dump(const nlohmann::json& j);

// Typed access to optional request fields; a wrong type is a malformed
// request (400) naming the field.
template <typename T>
Status ReadField(const nlohmann::json& body, const char* key, T& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return Status::Ok();
  bool ok;
  if constexpr (std::is_same_v<T, bool>) {
    ok = it->is_boolean();
  } else if constexpr (std::is_integral_v<T>) {
    ok = it->is_number_integer() && !(std::is_signed_v<T> && it->is_number_unsigned() &&
                                      it->template get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX));
  } else if constexpr (std::is_floating_point_v<T>) {
    ok = it->is_number();
  } else {
    ok = it->is_string();
  }
  if (!ok) return MalformedRequest("'" + std::string(key) + "' has the wrong type: " + it->dump().substr(0, 100));
  out = it->template get<T>();
  return Status::Ok();
}

}  // namespace ropeserve::api
