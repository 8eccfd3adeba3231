// Helpers for reading one tokenizer.json component (internal to
// server/tokenizer): its "type", token ids, and errors that name the
// component. Typed fields are read with the one JsonReader
// (server/common/json_reader.h), whose errors name the component too.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "server/common/json_reader.h"
#include "server/common/status.h"

namespace ropeserve::tok {

inline Status Bad(const std::string& where, const std::string& what) { return InvalidArgument(where + ": " + what); }

// A token id written in tokenizer.json: an integer from 0 to 2^31 - 1
// (TokenId's range).
inline bool IsTokenId(const nlohmann::json& v) {
  return v.is_number_unsigned() && v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT32_MAX);
}

// The component's "type" ("" when absent or not a string).
inline std::string TypeOf(const nlohmann::json& j) {
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace ropeserve::tok
