// JSON text from outside (REST bodies, batch input lines): JSON that is not
// JSON, not UTF-8, too deeply nested, or not an object is a malformed
// request (400) naming the problem; and JSON written back without throwing
// on invalid UTF-8. Below every transport (server/api and server/batch use
// it), so it lives in common.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "server/common/status.h"

namespace ropeserve {

// Bodies nested deeper than this are refused before parsing, so that no
// later recursive walk (templates, serialisation) can exhaust the stack.
constexpr int kMaxJsonDepth = 64;

// MalformedRequest when `text` nests brackets deeper than kMaxJsonDepth.
Status CheckJsonDepth(const std::string& text);

// A JSON object with its keys in the sender's order (chat templates render
// tools with tojson), or MalformedRequest.
StatusOr<nlohmann::ordered_json> ParseJsonObject(const std::string& text);

// MalformedRequest naming the field (OpenAI's `param`).
Status Malformed(const std::string& param, const std::string& message);

// A query or form value that must be a decimal integer from `lo` to `hi`;
// else Malformed naming `param`.
StatusOr<std::int64_t> IntegerParam(const std::string& param, const std::string& value, std::int64_t lo,
                                    std::int64_t hi);
// A list's `order`: true for "asc", false for "desc"; else Malformed.
StatusOr<bool> AscendingParam(const std::string& value);

// Compact JSON text; invalid UTF-8 in strings is replaced, never thrown on.
std::string Dump(const nlohmann::json& j);
std::string DumpOrdered(const nlohmann::ordered_json& j);  // the same, keys in insertion order

}  // namespace ropeserve
