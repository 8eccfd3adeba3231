// Reading typed fields of a JSON request body: the rule table of the
// fields an endpoint knows (unknown fields are a 400 naming them, as
// OpenAI's API answers), and typed reads that name the field on a wrong
// type. Shared by the REST body readers (rest_request.cc,
// rest_qa_request.cc). Header-only templates; model-free.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "server/api/json_request.h"
#include "server/common/status.h"

namespace ropeserve::api {

using ojson = nlohmann::ordered_json;

// A value quoted in an error message: at most 100 bytes, invalid UTF-8 replaced.
inline std::string Show(const ojson& v) {
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace).substr(0, 100);
}

// ---- the fields each endpoint knows ----

// A field is read, accepted and ignored (it changes nothing about the
// output), or refused when its value asks for behaviour not implemented.
enum class Kind { kRead, kIgnored, kUnsupported };
struct Rule {
  const char* name;
  Kind kind;
  bool (*asks)(const ojson&) = nullptr;  // kUnsupported: does this value ask for it?
};

inline bool NotNull(const ojson& v) { return !v.is_null(); }
inline bool NotFalse(const ojson& v) { return !v.is_null() && !(v.is_boolean() && !v.get<bool>()); }
inline bool NotEmpty(const ojson& v) {
  if (v.is_null()) return false;
  if (v.is_object() || v.is_array() || v.is_string()) return !v.empty();
  return true;
}
template <std::size_t N>
const Rule* Find(const Rule (&rules)[N], const std::string& key) {
  for (const Rule& r : rules)
    if (key == r.name) return &r;
  return nullptr;
}

// Every key of `body` must be known to one of the rule sets; unsupported
// values are refused.
template <std::size_t... Ns>
Status CheckFields(const ojson& body, const Rule (&... sets)[Ns]) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    const Rule* rule = nullptr;
    ((rule = rule ? rule : Find(sets, it.key())), ...);
    const std::string key = it.key().substr(0, 100);
    if (rule == nullptr)
      return Malformed(key, "unrecognized request argument: '" + key + "'").WithReason("unknown_parameter");
    if (rule->kind == Kind::kUnsupported && rule->asks(it.value()))
      return Malformed(key, "'" + key + "' is not supported by this server (" + Show(it.value()) + ")")
          .WithReason("unsupported_parameter");
  }
  return Status::Ok();
}

// ---- typed reads ----

template <typename T>
Status Read(const ojson& body, const char* key, std::optional<T>& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return Status::Ok();
  bool ok;
  if constexpr (std::is_same_v<T, bool>) {
    ok = it->is_boolean();
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    ok = it->is_number_integer();  // seeds: any integer, taken modulo 2^64
  } else if constexpr (std::is_integral_v<T>) {
    ok = it->is_number_integer() &&
         !(it->is_number_unsigned() && it->template get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX));
  } else if constexpr (std::is_floating_point_v<T>) {
    ok = it->is_number();
  } else {
    ok = it->is_string();
  }
  if (!ok) return Malformed(key, "'" + std::string(key) + "' has the wrong type: " + Show(*it));
  if constexpr (std::is_same_v<T, std::uint64_t>) {
    out = it->is_number_unsigned() ? it->template get<std::uint64_t>()
                                   : static_cast<std::uint64_t>(it->template get<std::int64_t>());
  } else {
    out = it->template get<T>();
  }
  return Status::Ok();
}

template <typename T>
Status ReadInto(const ojson& body, const char* key, T& out) {
  std::optional<T> v;
  RS_RETURN_IF_ERROR(Read(body, key, v));
  if (v) out = std::move(*v);
  return Status::Ok();
}

}  // namespace ropeserve::api
