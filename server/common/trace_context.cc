#include "server/common/trace_context.h"

#include <algorithm>
#include <random>

namespace ropeserve {

namespace {

std::uint64_t RandomWord() {
  thread_local std::mt19937_64 rng{(static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}()};
  return rng();
}

template <std::size_t N>
bool AllZero(const std::array<std::uint8_t, N>& a) {
  return std::all_of(a.begin(), a.end(), [](std::uint8_t b) { return b == 0; });
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case is invalid in traceparent
}

// Decodes exactly 2*N lower-case hex digits.
template <std::size_t N>
bool ParseHex(std::string_view s, std::array<std::uint8_t, N>& out) {
  if (s.size() != 2 * N) return false;
  for (std::size_t i = 0; i < N; ++i) {
    const int hi = HexDigit(s[2 * i]), lo = HexDigit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return true;
}

template <std::size_t N>
void FillRandom(std::array<std::uint8_t, N>& a) {
  do {
    for (std::size_t i = 0; i < N; i += 8) {
      const std::uint64_t w = RandomWord();
      for (std::size_t j = 0; j < 8 && i + j < N; ++j) a[i + j] = static_cast<std::uint8_t>(w >> (8 * j));
    }
  } while (AllZero(a));
}

}  // namespace

std::string HexBytes(const std::uint8_t* bytes, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[bytes[i] >> 4];
    s[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return s;
}

std::array<std::uint8_t, 8> NewSpanId() {
  std::array<std::uint8_t, 8> id{};
  FillRandom(id);
  return id;
}

bool TraceContext::valid() const { return !AllZero(trace_id) && !AllZero(span_id); }

std::string TraceContext::TraceIdHex() const { return HexBytes(trace_id.data(), trace_id.size()); }
std::string TraceContext::SpanIdHex() const { return HexBytes(span_id.data(), span_id.size()); }

std::string TraceContext::ToTraceparent() const {
  return "00-" + TraceIdHex() + "-" + SpanIdHex() + (sampled ? "-01" : "-00");
}

std::optional<TraceContext> TraceContext::Parse(std::string_view h) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2.
  constexpr std::size_t kLen = 55;
  if (h.size() < kLen || h[2] != '-' || h[35] != '-' || h[52] != '-') return std::nullopt;
  std::array<std::uint8_t, 1> version{}, flags{};
  if (!ParseHex(h.substr(0, 2), version) || version[0] == 0xff) return std::nullopt;
  // Version 00 is exactly 55 characters; a later version may append fields
  // after another '-', which a version-00 parser ignores.
  if (h.size() > kLen && (version[0] == 0 || h[kLen] != '-')) return std::nullopt;
  TraceContext t;
  if (!ParseHex(h.substr(3, 32), t.trace_id) || !ParseHex(h.substr(36, 16), t.span_id) ||
      !ParseHex(h.substr(53, 2), flags) || !t.valid())
    return std::nullopt;
  t.sampled = (flags[0] & 1) != 0;
  return t;
}

TraceContext TraceContext::NewRoot() {
  TraceContext t;
  FillRandom(t.trace_id);
  t.span_id = NewSpanId();
  t.sampled = true;
  return t;
}

TraceContext TraceContext::NewChild() const {
  TraceContext t = *this;
  t.span_id = NewSpanId();
  return t;
}

}  // namespace ropeserve
