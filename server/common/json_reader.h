// The one typed reader of JSON objects, for every JSON input the server
// reads: request bodies (server/api), tokenizer.json components
// (server/tokenizer) and config.json / generation_config.json
// (server/checkpoint). One set of type rules and one error wording:
//   - a key that is absent or null is "not given" (the caller's default);
//   - integers: JSON integers, or floats with no fraction (some exporters
//     write 2048.0; Pydantic, behind vLLM's API, accepts them too), within
//     the range of the C++ type; std::uint64_t (seeds) takes any integer,
//     a negative one modulo 2^64;
//   - numbers: finite; strings and booleans: exactly those JSON types;
//   - a wrong value is "'<key>' must be <what>, got <value>" (the value
//     at most 100 bytes), made a Status by the reader's error maker: by
//     default InvalidArgument("<where>: ..."); request bodies make a 400
//     naming the field (server/api/rest/json_fields.h).
// Header-only templates over nlohmann's json and ordered_json; model-free.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "server/common/status.h"

namespace ropeserve {

// A JSON value quoted in an error message: at most 100 bytes, invalid UTF-8
// replaced.
template <class Json>
std::string ShowJson(const Json& v) {
  return v.dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 100);
}

// Makes the Status of a bad or missing key: `where` is the reader's, `key`
// the field, `message` the sentence naming both.
using JsonErrorMaker = Status (*)(const std::string& where, const std::string& key, const std::string& message);

inline Status InvalidArgumentIn(const std::string& where, const std::string& /*key*/, const std::string& message) {
  return InvalidArgument(where.empty() ? message : where + ": " + message);
}

template <class Json>
class JsonReader {
 public:
  // `obj` must outlive the reader. `where` names the object in errors (a
  // file and a path in it; "" for a request body, whose errors name the
  // field instead).
  JsonReader(const Json& obj, std::string where, JsonErrorMaker error = &InvalidArgumentIn)
      : obj_(obj), where_(std::move(where)), error_(error) {}

  const std::string& where() const { return where_; }

  // The value at `key`, or nullptr when the key is absent or null (or the
  // reader's value is not an object).
  const Json* Find(const char* key) const {
    if (!obj_.is_object()) return nullptr;
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  bool Has(const char* key) const { return Find(key) != nullptr; }

  // Optional field: `out` is set when the key is given, left alone when not.
  template <class T>
  Status Read(const char* key, std::optional<T>& out) const {
    const Json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    std::optional<T> got = As<T>(*v);
    if (!got) return Bad(key, What<T>());
    out = std::move(got);
    return Status::Ok();
  }
  template <class T>
  Status ReadInto(const char* key, T& out) const {
    std::optional<T> v;
    RS_RETURN_IF_ERROR(Read(key, v));
    if (v) out = std::move(*v);
    return Status::Ok();
  }

  // Field with a default, or required when `def` is nullopt.
  template <class T>
  StatusOr<T> Get(const char* key, std::optional<T> def = std::nullopt) const {
    std::optional<T> v;
    RS_RETURN_IF_ERROR(Read(key, v));
    if (v) return std::move(*v);
    if (def) return std::move(*def);
    return Missing(key);
  }
  StatusOr<std::int64_t> Int(const char* key, std::optional<std::int64_t> def = std::nullopt) const {
    return Get<std::int64_t>(key, def);
  }
  StatusOr<double> Double(const char* key, std::optional<double> def = std::nullopt) const {
    return Get<double>(key, def);
  }
  StatusOr<bool> Bool(const char* key, bool def) const { return Get<bool>(key, def); }
  StatusOr<std::string> String(const char* key, std::optional<std::string> def = std::nullopt) const {
    return Get<std::string>(key, std::move(def));
  }

  // A required array.
  StatusOr<const Json*> Array(const char* key) const {
    const Json* v = Find(key);
    if (v == nullptr) return Missing(key);
    if (!v->is_array()) return Bad(key, "an array");
    return v;
  }

  // An integer or a list of integers (eos_token_id); empty when not given.
  StatusOr<std::vector<std::int64_t>> IntOrList(const char* key) const {
    std::vector<std::int64_t> out;
    const Json* v = Find(key);
    if (v == nullptr) return out;
    if (auto one = As<std::int64_t>(*v)) {
      out.push_back(*one);
      return out;
    }
    if (!v->is_array()) return Bad(key, "an integer or a list of integers");
    for (const Json& e : *v) {
      auto x = As<std::int64_t>(e);
      if (!x) return Bad(key, "an integer or a list of integers");
      out.push_back(*x);
    }
    return out;
  }

  Status Missing(const char* key) const {
    return error_(where_, key, std::string("missing required key '") + key + "'");
  }
  // `what` completes "'<key>' must be ...".
  Status Bad(const char* key, const std::string& what) const {
    std::string message = std::string("'") + key + "' must be " + what;
    if (const Json* v = Find(key)) message += ", got " + ShowJson(*v);
    return error_(where_, key, message);
  }

  // The type rules above, for one value: nullopt when `v` is not a T.
  template <class T>
  static std::optional<T> As(const Json& v) {
    if constexpr (std::is_same_v<T, bool>) {
      if (v.is_boolean()) return v.template get<bool>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (v.is_string()) return v.template get<std::string>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (v.is_number()) {
        const double d = v.template get<double>();
        if (std::isfinite(d)) return static_cast<T>(d);
      }
    } else if constexpr (std::is_same_v<T, std::uint64_t>) {
      if (v.is_number_unsigned()) return v.template get<std::uint64_t>();
      if (v.is_number_integer()) return static_cast<std::uint64_t>(v.template get<std::int64_t>());
      if (auto i = AsInt64(v)) return static_cast<std::uint64_t>(*i);
    } else {
      static_assert(std::is_integral_v<T> && std::is_signed_v<T>, "JsonReader reads bool, string, numbers, integers");
      if (auto i = AsInt64(v); i && *i >= std::numeric_limits<T>::min() && *i <= std::numeric_limits<T>::max())
        return static_cast<T>(*i);
    }
    return std::nullopt;
  }

 private:
  static std::optional<std::int64_t> AsInt64(const Json& v) {
    if (v.is_number_unsigned()) {
      const auto u = v.template get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
      return static_cast<std::int64_t>(u);
    }
    if (v.is_number_integer()) return v.template get<std::int64_t>();
    if (v.is_number_float()) {
      const double d = v.template get<double>();
      // 2^53: past it a double no longer names one integer.
      if (std::isfinite(d) && std::floor(d) == d && std::abs(d) <= 9007199254740992.0)
        return static_cast<std::int64_t>(d);
    }
    return std::nullopt;
  }

  template <class T>
  static const char* What() {
    if constexpr (std::is_same_v<T, bool>) return "true or false";
    if constexpr (std::is_same_v<T, std::string>) return "a string";
    if constexpr (std::is_floating_point_v<T>) return "a finite number";
    return "an integer";
  }

  const Json& obj_;
  std::string where_;
  JsonErrorMaker error_;
};

template <class Json>
JsonReader(const Json&, std::string) -> JsonReader<Json>;
template <class Json>
JsonReader(const Json&, std::string, JsonErrorMaker) -> JsonReader<Json>;

}  // namespace ropeserve
