// Typed access to tokenizer.json fields with errors that say which field of
// which component is wrong (internal to server/tokenizer).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "server/common/status.h"

namespace ropeserve::tok::json_fields {

inline Status Bad(const std::string& where, const std::string& what) { return InvalidArgument(where + ": " + what); }

inline StatusOr<bool> Bool(const nlohmann::json& j, const char* key, bool def, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean()) return Bad(where, std::string("'") + key + "' must be true or false");
  return it->get<bool>();
}

inline StatusOr<std::string> String(const nlohmann::json& j, const char* key, const std::string& where,
                                    const char* def = nullptr) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (def != nullptr) return std::string(def);
    return Bad(where, std::string("missing string field '") + key + "'");
  }
  if (!it->is_string()) return Bad(where, std::string("'") + key + "' must be a string");
  return it->get<std::string>();
}

inline StatusOr<long long> Int(const nlohmann::json& j, const char* key, long long def, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number_integer()) return Bad(where, std::string("'") + key + "' must be an integer");
  return it->get<long long>();
}

inline StatusOr<const nlohmann::json*> Array(const nlohmann::json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) {
    return Bad(where, std::string("missing array field '") + key + "'");
  }
  return &*it;
}

// A token id written in tokenizer.json: an integer from 0 to 2^31 - 1
// (TokenId's range).
inline bool IsTokenId(const nlohmann::json& v) {
  return v.is_number_unsigned() && v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT32_MAX);
}

inline std::string TypeOf(const nlohmann::json& j) {
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace ropeserve::tok::json_fields
