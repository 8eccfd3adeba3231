// W3C Trace Context (https://www.w3.org/TR/trace-context/): the identity of
// a request in a distributed trace, as carried by the `traceparent` header
// ("00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>").
//
// The front ends parse the client's header (or start a new trace), open one
// server span per request, and hand the request's TraceContext down with it
// (GenerateOptions -> EngineRequest -> RequestMetrics), so the spans the
// engine's work produces (queue, prefill, decode) hang under that server
// span. Torch-free, model-free; no dependency beyond the standard library.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ropeserve {

struct TraceContext {
  std::array<std::uint8_t, 16> trace_id{};  // all zero: no trace
  std::array<std::uint8_t, 8> span_id{};    // the span the work belongs to
  bool sampled = false;                     // flags bit 0: spans are recorded and exported

  bool valid() const;  // a non-zero trace id and span id
  std::string TraceIdHex() const;
  std::string SpanIdHex() const;
  // "00-<trace>-<span>-<flags>".
  std::string ToTraceparent() const;

  // The client's `traceparent`, when it is well formed (version 00, or a
  // higher version's first four fields as the spec asks; lower-case hex,
  // non-zero ids); nullopt otherwise (the caller then starts a new trace).
  static std::optional<TraceContext> Parse(std::string_view header);
  // A new trace with a random trace id and span id; sampled.
  static TraceContext NewRoot();
  // A span under this one: the same trace and flags, a new random span id.
  TraceContext NewChild() const;
};

// A random non-zero 8-byte span id (thread-safe).
std::array<std::uint8_t, 8> NewSpanId();

// Lower-case hex of `n` bytes.
std::string HexBytes(const std::uint8_t* bytes, std::size_t n);

}  // namespace ropeserve
