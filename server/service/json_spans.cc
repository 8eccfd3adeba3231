#include "server/service/json_spans.h"

#include <nlohmann/json.hpp>

namespace ropeserve::service {
namespace {

constexpr std::size_t kBad = std::string_view::npos;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

std::size_t SkipSpace(std::string_view s, std::size_t i) {
  while (i < s.size() && IsSpace(s[i])) ++i;
  return i;
}

// The length of the UTF-8 sequence at s[i] (RFC 3629: no overlongs, no
// surrogates, at most U+10FFFF), or 0 when it is not one.
std::size_t Utf8Length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [&](std::size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(1) >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

// Each Scan* takes the position of the value's first byte and returns the
// position after it, or kBad.
std::size_t ScanString(std::string_view s, std::size_t i) {
  if (i >= s.size() || s[i] != '"') return kBad;
  ++i;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"') return i + 1;
    if (static_cast<unsigned char>(c) < 0x20) return kBad;
    if (c == '\\') {
      if (i + 1 >= s.size()) return kBad;
      const char e = s[i + 1];
      if (e == 'u') {
        if (i + 6 > s.size()) return kBad;
        for (std::size_t k = 2; k < 6; ++k)
          if (!IsHex(s[i + k])) return kBad;
        i += 6;
      } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
        i += 2;
      } else {
        return kBad;
      }
      continue;
    }
    const std::size_t n = Utf8Length(s, i);
    if (n == 0) return kBad;
    i += n;
  }
  return kBad;
}

std::size_t ScanNumber(std::string_view s, std::size_t i) {
  const auto digits = [&](std::size_t j) {
    const std::size_t from = j;
    while (j < s.size() && IsDigit(s[j])) ++j;
    return j > from ? j : kBad;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (i >= s.size()) return kBad;
  if (s[i] == '0') {
    ++i;
  } else {
    i = digits(i);
    if (i == kBad) return kBad;
  }
  if (i < s.size() && s[i] == '.') {
    i = digits(i + 1);
    if (i == kBad) return kBad;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    i = digits(i);
  }
  return i;
}

std::size_t ScanValue(std::string_view s, std::size_t i, int depth);

// A container opening at s[i]; each(key_literal, value) for each element
// (key_literal empty in arrays).
template <typename Each>
std::size_t ScanContainer(std::string_view s, std::size_t i, int depth, const Each& each) {
  if (depth >= kMaxJsonDepth) return kBad;
  const bool object = s[i] == '{';
  const char close = object ? '}' : ']';
  i = SkipSpace(s, i + 1);
  if (i < s.size() && s[i] == close) return i + 1;
  for (;;) {
    std::string_view key;
    if (object) {
      const std::size_t key_end = ScanString(s, i);
      if (key_end == kBad) return kBad;
      key = s.substr(i, key_end - i);
      i = SkipSpace(s, key_end);
      if (i >= s.size() || s[i] != ':') return kBad;
      i = SkipSpace(s, i + 1);
    }
    const std::size_t end = ScanValue(s, i, depth + 1);
    if (end == kBad) return kBad;
    each(key, s.substr(i, end - i));
    i = SkipSpace(s, end);
    if (i >= s.size()) return kBad;
    if (s[i] == close) return i + 1;
    if (s[i] != ',') return kBad;
    i = SkipSpace(s, i + 1);
  }
}

std::size_t ScanValue(std::string_view s, std::size_t i, int depth) {
  if (i >= s.size()) return kBad;
  switch (s[i]) {
    case '"':
      return ScanString(s, i);
    case '{':
    case '[':
      return ScanContainer(s, i, depth, [](std::string_view, std::string_view) {});
    case 't':
      return s.substr(i, 4) == "true" ? i + 4 : kBad;
    case 'f':
      return s.substr(i, 5) == "false" ? i + 5 : kBad;
    case 'n':
      return s.substr(i, 4) == "null" ? i + 4 : kBad;
    default:
      return ScanNumber(s, i);
  }
}

// The container that is the whole of `text`, its elements passed to each.
template <typename Each>
bool WholeContainer(std::string_view text, char open, const Each& each) {
  const std::size_t i = SkipSpace(text, 0);
  if (i >= text.size() || text[i] != open) return false;
  const std::size_t end = ScanContainer(text, i, 0, each);
  return end != kBad && SkipSpace(text, end) == text.size();
}

}  // namespace

bool IsJsonText(std::string_view text) {
  const std::size_t end = ScanValue(text, SkipSpace(text, 0), 0);
  return end != kBad && SkipSpace(text, end) == text.size();
}

std::optional<std::string> JsonStringValue(std::string_view literal) {
  if (ScanString(literal, 0) != literal.size()) return std::nullopt;
  // A checked string literal: the JSON library decodes its escapes.
  auto v = nlohmann::json::parse(literal, nullptr, false);
  if (!v.is_string()) return std::nullopt;
  return v.get<std::string>();
}

std::optional<std::vector<std::pair<std::string, std::string_view>>> JsonObjectMembers(std::string_view text) {
  std::vector<std::pair<std::string_view, std::string_view>> raw;
  if (!WholeContainer(text, '{', [&](std::string_view k, std::string_view v) { raw.emplace_back(k, v); }))
    return std::nullopt;
  std::vector<std::pair<std::string, std::string_view>> members;
  for (const auto& [k, v] : raw) {
    auto key = JsonStringValue(k);
    if (!key) return std::nullopt;
    members.emplace_back(std::move(*key), v);
  }
  return members;
}

std::optional<std::vector<std::string_view>> JsonArrayElements(std::string_view text) {
  std::vector<std::string_view> elements;
  if (!WholeContainer(text, '[', [&](std::string_view, std::string_view v) { elements.push_back(v); }))
    return std::nullopt;
  return elements;
}

}  // namespace ropeserve::service
