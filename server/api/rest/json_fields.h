// Reading typed fields of a JSON request body: the rule table of the
// fields an endpoint knows (unknown fields are a 400 naming them, as
// OpenAI's API answers), and typed reads that name the field on a wrong
// type (server/common/json_reader.h's rules, errors naming the field).
// Shared by the REST body readers (rest_request.cc, rest_qa_request.cc).
// Header-only; model-free.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "server/common/json_reader.h"
#include "server/common/json_text.h"
#include "server/common/status.h"

namespace ropeserve::api {

using ojson = nlohmann::ordered_json;

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
      return Malformed(key, "'" + key + "' is not supported by this server (" + ShowJson(it.value()) + ")")
          .WithReason("unsupported_parameter");
  }
  return Status::Ok();
}

// Every key of the object at `at` is one of `known`; else a 400 naming the
// first other key ("unrecognized <what> field: 'k'"). For the nested
// objects of a request, whose keys CheckFields does not see.
inline Status OnlyKeys(const ojson& object, const std::string& at, std::initializer_list<const char*> known,
                       const std::string& what = "") {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (ok) continue;
    const std::string key = it.key().substr(0, 100);
    return Malformed(at + "." + key, "unrecognized " + (what.empty() ? "" : what + " ") + "field: '" + key + "'")
        .WithReason("unknown_parameter");
  }
  return Status::Ok();
}

// ---- typed reads ----

// Errors of a request body name the field (OpenAI's `param`): `where` is
// the path of the object in the body ("" at the top, "parameters" inside).
inline Status MalformedField(const std::string& where, const std::string& key, const std::string& message) {
  return Malformed(where.empty() ? key : where + "." + key, message);
}

// The reader of a request body object (the type rules of JsonReader).
inline JsonReader<ojson> BodyReader(const ojson& body, std::string where = "") {
  return JsonReader<ojson>(body, std::move(where), &MalformedField);
}

template <typename T>
Status Read(const ojson& body, const char* key, std::optional<T>& out) {
  return BodyReader(body).Read(key, out);
}

template <typename T>
Status ReadInto(const ojson& body, const char* key, T& out) {
  return BodyReader(body).ReadInto(key, out);
}

}  // namespace ropeserve::api
