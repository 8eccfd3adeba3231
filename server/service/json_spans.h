// Generated JSON, checked and taken apart without converting it, so that
// what the model wrote reaches the client byte for byte. Parsing with
// nlohmann and dumping again changes the model's bytes (a 27-digit integer
// comes back as 5.777887555217552e+26, 0.10000000000000000555 as 0.1,
// "\u00e9" as "é", spacing goes), and nlohmann refuses valid JSON whose
// numbers overflow a double (a 400-digit integer, which a random or a
// careless model writes). nlohmann-json 3.11 (Debian 12) keeps no source
// positions and has no raw-number mode; hence this small scanner.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ropeserve::service {

// Nesting deeper than this is refused (the check recurses).
inline constexpr int kMaxJsonDepth = 256;

// Whether `text` is exactly one JSON value (RFC 8259: no trailing commas,
// no comments, strings of valid UTF-8 without raw control characters),
// surrounding whitespace allowed. Numbers of any length are valid.
bool IsJsonText(std::string_view text);

// The members of a JSON object text, in order: the decoded key and the
// value's text exactly as written (no surrounding whitespace). nullopt
// unless the text is a valid JSON object.
std::optional<std::vector<std::pair<std::string, std::string_view>>> JsonObjectMembers(std::string_view text);

// The elements of a JSON array text, each exactly as written. nullopt
// unless the text is a valid JSON array.
std::optional<std::vector<std::string_view>> JsonArrayElements(std::string_view text);

// The content of a JSON string literal ("\"a\\u00e9\"" -> "aé"); nullopt
// unless `literal` is one valid JSON string.
std::optional<std::string> JsonStringValue(std::string_view literal);

}  // namespace ropeserve::service
