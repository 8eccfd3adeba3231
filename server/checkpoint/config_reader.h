// Typed, validated reads of a config.json object, shared by the decoder and
// encoder config parsers; every error names the file and the key.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/common/status.h"

namespace ropeserve {

// Typed, validated access to one JSON object; errors name the file and key.
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  bool Has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }

  StatusOr<std::int64_t> Int(const char* key, std::optional<std::int64_t> def = std::nullopt) const {
    if (!Has(key)) {
      if (def) return *def;
      return Missing(key);
    }
    const nlohmann::json& v = obj_.at(key);
    if (v.is_number_integer()) return v.get<std::int64_t>();
    if (v.is_number_float()) {  // some exporters write 2048.0
      double d = v.get<double>();
      if (std::floor(d) == d && std::abs(d) < 9e15) return static_cast<std::int64_t>(d);
    }
    return Bad(key, "an integer");
  }

  StatusOr<double> Double(const char* key, std::optional<double> def = std::nullopt) const {
    if (!Has(key)) {
      if (def) return *def;
      return Missing(key);
    }
    const nlohmann::json& v = obj_.at(key);
    if (!v.is_number()) return Bad(key, "a number");
    double d = v.get<double>();
    if (!std::isfinite(d)) return Bad(key, "a finite number");
    return d;
  }

  StatusOr<bool> Bool(const char* key, bool def) const {
    if (!Has(key)) return def;
    const nlohmann::json& v = obj_.at(key);
    if (!v.is_boolean()) return Bad(key, "true or false");
    return v.get<bool>();
  }

  StatusOr<std::string> String(const char* key, std::optional<std::string> def = std::nullopt) const {
    if (!Has(key)) {
      if (def) return *def;
      return Missing(key);
    }
    const nlohmann::json& v = obj_.at(key);
    if (!v.is_string()) return Bad(key, "a string");
    return v.get<std::string>();
  }

  // eos_token_id: an int or a list of ints.
  StatusOr<std::vector<std::int64_t>> IntOrList(const char* key) const {
    std::vector<std::int64_t> out;
    if (!Has(key)) return out;
    const nlohmann::json& v = obj_.at(key);
    if (v.is_number_integer()) {
      out.push_back(v.get<std::int64_t>());
      return out;
    }
    if (!v.is_array()) return Bad(key, "an integer or a list of integers");
    for (const auto& e : v) {
      if (!e.is_number_integer()) return Bad(key, "an integer or a list of integers");
      out.push_back(e.get<std::int64_t>());
    }
    return out;
  }

  Status Missing(const char* key) const { return InvalidArgument(where_ + ": missing required key '" + key + "'"); }
  Status Bad(const char* key, const char* what) const {
    return InvalidArgument(where_ + ": '" + key + "' must be " + what + ", got " + obj_.at(key).dump());
  }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& obj_;
  std::string where_;
};

}  // namespace ropeserve
