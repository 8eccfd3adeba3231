#include "server/structured/json_schema.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <set>
#include <unordered_map>

#include "server/structured/regex.h"

namespace ropeserve::structured {

using json = nlohmann::ordered_json;

namespace {

// Recursion through $ref is cut after this many nested expansions of one
// reference (the branch that would go deeper matches nothing, so optional
// properties and arrays end there).
constexpr int kMaxRefDepth = 3;
constexpr long long kMaxInteger = 999999999999999999LL;  // 18 digits: bounds beyond are refused

Expr Lit(std::string_view s) { return Expr::Literal(s); }

// Unescaped characters allowed inside a JSON string.
const CodePointSet& JsonSafeChars() {
  static const CodePointSet set = Normalize({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}});
  return set;
}

Expr Digit() {
  ByteSet s;
  for (int c = '0'; c <= '9'; ++c) s.set(static_cast<std::size_t>(c));
  return Expr::Bytes(s);
}

Expr DigitRange(char lo, char hi) {
  ByteSet s;
  for (int c = lo; c <= hi; ++c) s.set(static_cast<std::size_t>(c));
  return Expr::Bytes(s);
}

Expr JsonChar() {
  ByteSet simple_escapes;
  for (char c : std::string_view("\"\\/bfnrt")) simple_escapes.set(static_cast<unsigned char>(c));
  ByteSet hex, hex_no_d;
  for (char c : std::string_view("0123456789abcdefABCDEF")) hex.set(static_cast<unsigned char>(c));
  hex_no_d = hex;
  hex_no_d.reset('d');
  hex_no_d.reset('D');
  ByteSet d;
  d.set('d');
  d.set('D');
  // \uXXXX without surrogates: a first digit other than d, or d then 0-7.
  Expr u = Expr::Seq({Lit("\\u"),
                      Expr::Alt({Expr::Seq({Expr::Bytes(hex_no_d), Expr::Bytes(hex)}),
                                 Expr::Seq({Expr::Bytes(d), DigitRange('0', '7')})}),
                      Expr::Bytes(hex), Expr::Bytes(hex)});
  return Expr::Alt({Utf8Class(JsonSafeChars()), Expr::Seq({Lit("\\"), Expr::Bytes(simple_escapes)}), u});
}

// Separators: the character and an optional single space.
Expr Sep(char c) { return Expr::Seq({Expr::Byte(static_cast<unsigned char>(c)), Expr::Optional(Lit(" "))}); }

std::string Digits(unsigned long long v) { return std::to_string(v); }

// Equal-length digit strings a <= b: every digit string of that length in
// [a, b] (leading zeros allowed: these are suffixes).
Expr FixedRange(const std::string& a, const std::string& b) {
  if (a.empty()) return Expr::Empty();
  if (a == b) return Lit(a);
  if (a[0] == b[0]) return Expr::Seq({Lit(a.substr(0, 1)), FixedRange(a.substr(1), b.substr(1))});
  const std::size_t rest = a.size() - 1;
  const std::string nines(rest, '9'), zeros(rest, '0');
  std::vector<Expr> options;
  options.push_back(Expr::Seq({Lit(a.substr(0, 1)), FixedRange(a.substr(1), nines)}));
  if (b[0] - a[0] > 1)
    options.push_back(Expr::Seq({DigitRange(static_cast<char>(a[0] + 1), static_cast<char>(b[0] - 1)),
                                 Expr::Repeat(Digit(), static_cast<int>(rest), static_cast<int>(rest))}));
  options.push_back(Expr::Seq({Lit(b.substr(0, 1)), FixedRange(zeros, b.substr(1))}));
  return Expr::Alt(std::move(options));
}

// Non-negative integers in [lo, hi] written without leading zeros; hi
// unbounded when nullopt.
Expr UnsignedRange(unsigned long long lo, std::optional<unsigned long long> hi) {
  std::vector<Expr> options;
  const std::size_t lo_digits = Digits(lo).size();
  const std::size_t hi_digits = hi ? Digits(*hi).size() : lo_digits;
  for (std::size_t d = lo_digits; d <= hi_digits; ++d) {
    unsigned long long first = d == 1 ? 0 : 1, last = 9;
    for (std::size_t k = 1; k < d; ++k) {
      first *= 10;
      last = last * 10 + 9;
    }
    if (d == 1) first = 0;
    const unsigned long long a = std::max(lo, first);
    const unsigned long long b = hi ? std::min(*hi, last) : last;
    if (a <= b) options.push_back(FixedRange(Digits(a), Digits(b)));
  }
  if (!hi)
    options.push_back(
        Expr::Seq({DigitRange('1', '9'), Expr::Repeat(Digit(), static_cast<int>(lo_digits), Expr::kUnbounded)}));
  if (options.empty()) return Expr::Nothing();
  return Expr::Alt(std::move(options));
}

// Values in [lo, hi] (either side open when nullopt) from a builder of
// non-negative ranges: the non-negative part, then '-' and a magnitude in
// [max(min_negative, -hi), -lo].
template <typename Magnitude>
Expr SignedRange(std::optional<long long> lo, std::optional<long long> hi, Magnitude magnitude,
                 unsigned long long min_negative) {
  using U = unsigned long long;
  std::vector<Expr> options;
  if (!hi || *hi >= 0)
    options.push_back(magnitude(static_cast<U>(std::max<long long>(lo.value_or(0), 0)),
                                hi ? std::optional<U>(static_cast<U>(*hi)) : std::nullopt));
  if (!lo || *lo < 0) {
    const U mag_lo = hi && *hi < 0 ? static_cast<U>(-*hi) : min_negative;
    options.push_back(
        Expr::Seq({Lit("-"), magnitude(mag_lo, lo ? std::optional<U>(static_cast<U>(-*lo)) : std::nullopt)}));
  }
  return Expr::Alt(std::move(options));
}

// Integers in [lo, hi]; never "-0".
Expr IntegerRange(std::optional<long long> lo, std::optional<long long> hi) {
  return SignedRange(lo, hi, UnsignedRange, 1);
}

Expr Fraction() { return Expr::Seq({Lit("."), Expr::Repeat(Digit(), 1, Expr::kUnbounded)}); }

// Non-negative reals in [lo, hi], integer bounds, no exponent.
Expr UnsignedRealRange(unsigned long long lo, std::optional<unsigned long long> hi) {
  if (!hi) return Expr::Seq({UnsignedRange(lo, std::nullopt), Expr::Optional(Fraction())});
  std::vector<Expr> options;
  if (lo < *hi) options.push_back(Expr::Seq({UnsignedRange(lo, *hi - 1), Expr::Optional(Fraction())}));
  options.push_back(Expr::Seq(
      {Lit(Digits(*hi)), Expr::Optional(Expr::Seq({Lit("."), Expr::Repeat(Lit("0"), 1, Expr::kUnbounded)}))}));
  return Expr::Alt(std::move(options));
}

// Reals in [lo, hi] (integer bounds, no exponent); "-0" only when 0 is in range.
Expr RealRange(std::optional<long long> lo, std::optional<long long> hi) {
  return SignedRange(lo, hi, UnsignedRealRange, 0);
}

Expr AnyNumber() {
  ByteSet e, sign;
  e.set('e');
  e.set('E');
  sign.set('+');
  sign.set('-');
  return Expr::Seq({Expr::Optional(Lit("-")), UnsignedRange(0, std::nullopt), Expr::Optional(Fraction()),
                    Expr::Optional(Expr::Seq({Expr::Bytes(e), Expr::Optional(Expr::Bytes(sign)),
                                              Expr::Repeat(Digit(), 1, Expr::kUnbounded)}))});
}

Expr AnyValue(int depth) {
  std::vector<Expr> options = {JsonStringExpr(), AnyNumber(), Lit("true"), Lit("false"), Lit("null")};
  if (depth > 0) {
    const Expr inner = AnyValue(depth - 1);
    options.push_back(Expr::Seq({Lit("["), Expr::SepBy(inner, Sep(','), 0, Expr::kUnbounded), Lit("]")}));
    options.push_back(
        Expr::Seq({Lit("{"), Expr::SepBy(Expr::Seq({JsonStringExpr(), Sep(':'), inner}), Sep(','), 0, Expr::kUnbounded),
                   Lit("}")}));
  }
  return Expr::Alt(std::move(options));
}

// A regex over a string's decoded characters (only unescaped ones are
// produced, so decoded == written).
StatusOr<Expr> StringPattern(const std::string& pattern, bool search) {
  RS_ASSIGN_OR_RETURN(ParsedRegex r, ParseRegex(pattern, &JsonSafeChars()));
  const Expr any = Expr::Repeat(Utf8Class(JsonSafeChars()), 0, Expr::kUnbounded);
  std::vector<Expr> parts = {Lit("\"")};
  if (search && !r.anchored_start) parts.push_back(any);
  parts.push_back(r.expr);
  if (search && !r.anchored_end) parts.push_back(any);
  parts.push_back(Lit("\""));
  return Expr::Seq(std::move(parts));
}

const std::unordered_map<std::string, std::string>& Formats() {
  // The subset of each format that ajv-formats' "full" mode accepts (Feb 29
  // and leap seconds left out rather than checked).
  static const std::string date =
      "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1["
      "0-9]|2[0-8]))";
  static const std::string time =
      "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
  static const std::unordered_map<std::string, std::string> formats = {
      {"date", "^" + date + "$"},
      {"time", "^" + time + "$"},
      {"date-time", "^" + date + "T" + time + "$"},
      {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
      {"email", "^[a-z0-9]+(?:[._+-][a-z0-9]+)*@(?:[a-z0-9]+(?:-[a-z0-9]+)*\\.)+[a-z]{2,}$"},
      {"ipv4",
       "^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$"},
  };
  return formats;
}

const std::set<std::string>& Annotations() {
  static const std::set<std::string> keys = {"title",    "description", "default",  "examples",  "$schema", "$id",
                                             "$comment", "deprecated",  "readOnly", "writeOnly", "$anchor"};
  return keys;
}

const std::set<std::string>& Supported() {
  static const std::set<std::string> keys = {"type",
                                             "properties",
                                             "required",
                                             "additionalProperties",
                                             "items",
                                             "prefixItems",
                                             "minItems",
                                             "maxItems",
                                             "enum",
                                             "const",
                                             "pattern",
                                             "minLength",
                                             "maxLength",
                                             "format",
                                             "minimum",
                                             "maximum",
                                             "exclusiveMinimum",
                                             "exclusiveMaximum",
                                             "anyOf",
                                             "oneOf",
                                             "allOf",
                                             "$ref",
                                             "$defs",
                                             "definitions"};
  return keys;
}

class Compiler {
 public:
  explicit Compiler(const json& root) : root_(root) {}

  StatusOr<Expr> Value(const json& s, const std::string& path) {
    // Nesting (and $ref chains) bounded: the compiler recurses.
    if (depth_ >= kMaxSchemaDepth)
      return Bad(path, "the schema nests deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
    ++depth_;
    auto e = ValueAt(s, path);
    --depth_;
    return e;
  }

 private:
  StatusOr<Expr> ValueAt(const json& s, const std::string& path) {
    if (s.is_boolean()) return s.get<bool>() ? AnyValue(kAnyValueDepth) : Expr::Nothing();
    if (!s.is_object()) return Bad(path, "a schema must be an object or a boolean");
    for (const auto& [key, _] : s.items()) {
      if (!Supported().count(key) && !Annotations().count(key))
        return InvalidArgument("JSON Schema keyword '" + key + "' (at " + path + ") is not supported");
    }
    if (s.contains("$ref")) return Ref(s, path);
    if (s.contains("allOf")) {
      const json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) return Bad(path, "'allOf' is only supported with exactly one schema");
      if (s.size() > 1 + CountAnnotations(s)) return Bad(path, "'allOf' beside other keywords is not supported");
      return Value(all[0], path + "/allOf/0");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& list = s[key];
      if (!list.is_array() || list.empty()) return Bad(path, std::string("'") + key + "' must be a non-empty array");
      json base = s;
      base.erase(key);
      std::vector<Expr> options;
      for (std::size_t i = 0; i < list.size(); ++i) {
        // Keywords beside anyOf apply to every branch.
        json branch = base;
        if (!list[i].is_object()) return Bad(path, std::string("'") + key + "' items must be schemas");
        for (const auto& [k, v] : list[i].items()) branch[k] = v;
        RS_ASSIGN_OR_RETURN(Expr e, Value(branch, path + "/" + key + "/" + std::to_string(i)));
        options.push_back(std::move(e));
      }
      return Expr::Alt(std::move(options));
    }
    if (s.contains("const")) return Lit(s["const"].dump());
    if (s.contains("enum")) {
      const json& values = s["enum"];
      if (!values.is_array() || values.empty()) return Bad(path, "'enum' must be a non-empty array");
      std::vector<Expr> options;
      for (const json& v : values) options.push_back(Lit(v.dump()));
      return Expr::Alt(std::move(options));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string())
        types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty()) {
        for (const json& x : t) {
          if (!x.is_string()) return Bad(path, "'type' must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return Bad(path, "'type' must be a string or an array of strings");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types = {"object"};
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) {
      types = {"array"};
    } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
      types = {"string"};
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum")) {
      types = {"number"};
    } else {
      return AnyValue(kAnyValueDepth);
    }
    std::vector<Expr> options;
    for (const std::string& t : types) {
      RS_ASSIGN_OR_RETURN(Expr e, Typed(s, t, path));
      options.push_back(std::move(e));
    }
    return Expr::Alt(std::move(options));
  }

  static Status Bad(const std::string& path, const std::string& what) {
    return InvalidArgument("JSON Schema at " + path + ": " + what);
  }
  static std::size_t CountAnnotations(const json& s) {
    std::size_t n = 0;
    for (const auto& [key, _] : s.items()) n += Annotations().count(key) + (key == "$defs" || key == "definitions");
    return n;
  }

  StatusOr<Expr> Ref(const json& s, const std::string& path) {
    if (!s["$ref"].is_string()) return Bad(path, "'$ref' must be a string");
    const std::string ref = s["$ref"].get<std::string>();
    if (ref != "#" && ref.rfind("#/", 0) != 0)
      return Bad(path, "only local references ('#', '#/$defs/...') are supported, not '" + ref + "'");
    const json* target = &root_;
    if (ref != "#") {
      try {
        target = &root_.at(json::json_pointer(ref.substr(1)));
      } catch (const std::exception&) {
        return Bad(path, "'$ref' '" + ref + "' does not resolve");
      }
    }
    int& depth = ref_depth_[ref];
    if (depth >= kMaxRefDepth) return Expr::Nothing();
    ++depth;
    auto e = Value(*target, ref);
    --depth;
    return e;
  }

  static StatusOr<std::optional<long long>> Bound(const json& s, const char* key, const std::string& path) {
    if (!s.contains(key)) return std::optional<long long>();
    const json& v = s[key];
    if (!v.is_number())
      return Bad(path, std::string("'") + key + "' must be a number (draft 4 boolean forms are not supported)");
    const double d = v.get<double>();
    if (!(std::fabs(d) <= static_cast<double>(kMaxInteger)))
      return Bad(path, std::string("'") + key + "' is out of the supported range");
    return std::optional<long long>(static_cast<long long>(std::llround(d)));
  }

  StatusOr<Expr> Typed(const json& s, const std::string& type, const std::string& path) {
    if (type == "null") return Lit("null");
    if (type == "boolean") return Expr::Alt({Lit("true"), Lit("false")});
    if (type == "string") return String(s, path);
    if (type == "integer" || type == "number") return Number(s, type == "integer", path);
    if (type == "array") return Array(s, path);
    if (type == "object") return Object(s, path);
    return Bad(path, "unknown type '" + type + "'");
  }

  StatusOr<Expr> String(const json& s, const std::string& path) {
    int min = 0, max = Expr::kUnbounded;
    if (s.contains("minLength")) {
      if (!s["minLength"].is_number_unsigned() || s["minLength"].get<long long>() > 1000)
        return Bad(path, "'minLength' must be an integer in [0, 1000]");
      min = s["minLength"].get<int>();
    }
    if (s.contains("maxLength")) {
      if (!s["maxLength"].is_number_unsigned() || s["maxLength"].get<long long>() > 1000)
        return Bad(path, "'maxLength' must be an integer in [0, 1000]");
      max = s["maxLength"].get<int>();
      if (max < min) return Expr::Nothing();
    }
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return Bad(path, "'pattern' must be a string");
      if (lengths || s.contains("format"))
        return Bad(path, "'pattern' with 'minLength', 'maxLength' or 'format' is not supported");
      auto e = StringPattern(s["pattern"].get<std::string>(), /*search=*/true);
      if (!e.ok()) return Bad(path, "'pattern': " + e.status().message());
      return e;
    }
    if (s.contains("format")) {
      if (!s["format"].is_string()) return Bad(path, "'format' must be a string");
      const std::string f = s["format"].get<std::string>();
      auto it = Formats().find(f);
      if (it == Formats().end())
        return InvalidArgument("JSON Schema 'format' '" + f + "' (at " + path + ") is not supported");
      if (lengths) return Bad(path, "'format' with 'minLength' or 'maxLength' is not supported");
      return StringPattern(it->second, /*search=*/false);
    }
    return JsonStringExpr(min, max);
  }

  StatusOr<Expr> Number(const json& s, bool integer, const std::string& path) {
    RS_ASSIGN_OR_RETURN(auto lo, Bound(s, "minimum", path));
    RS_ASSIGN_OR_RETURN(auto hi, Bound(s, "maximum", path));
    RS_ASSIGN_OR_RETURN(auto xlo, Bound(s, "exclusiveMinimum", path));
    RS_ASSIGN_OR_RETURN(auto xhi, Bound(s, "exclusiveMaximum", path));
    if (integer) {
      // Non-integer bounds round inwards.
      if (s.contains("minimum")) lo = static_cast<long long>(std::ceil(s["minimum"].get<double>()));
      if (s.contains("maximum")) hi = static_cast<long long>(std::floor(s["maximum"].get<double>()));
      if (xlo) {
        const long long v = static_cast<long long>(std::floor(s["exclusiveMinimum"].get<double>())) + 1;
        lo = lo ? std::max(*lo, v) : v;
      }
      if (xhi) {
        const long long v = static_cast<long long>(std::ceil(s["exclusiveMaximum"].get<double>())) - 1;
        hi = hi ? std::min(*hi, v) : v;
      }
      if (lo && hi && *lo > *hi) return Expr::Nothing();
      return IntegerRange(lo, hi);
    }
    if (xlo || xhi) return Bad(path, "'exclusiveMinimum'/'exclusiveMaximum' are only supported on integers");
    for (const char* key : {"minimum", "maximum"})
      if (s.contains(key) && s[key].get<double>() != std::floor(s[key].get<double>()))
        return Bad(path, std::string("'") + key + "' on a number must be an integer value");
    if (!lo && !hi) return AnyNumber();
    if (lo && hi && *lo > *hi) return Expr::Nothing();
    return RealRange(lo, hi);
  }

  StatusOr<int> Count(const json& s, const char* key, const std::string& path) {
    if (!s[key].is_number_unsigned() || s[key].get<long long>() > 1000)
      return Bad(path, std::string("'") + key + "' must be an integer in [0, 1000]");
    return s[key].get<int>();
  }

  StatusOr<Expr> Array(const json& s, const std::string& path) {
    int min = 0, max = Expr::kUnbounded;
    if (s.contains("minItems")) {
      RS_ASSIGN_OR_RETURN(min, Count(s, "minItems", path));
    }
    if (s.contains("maxItems")) {
      RS_ASSIGN_OR_RETURN(max, Count(s, "maxItems", path));
    }
    if (max != Expr::kUnbounded && max < min) return Expr::Nothing();
    if (s.contains("prefixItems")) {
      const json& tuple = s["prefixItems"];
      if (!tuple.is_array()) return Bad(path, "'prefixItems' must be an array");
      if (static_cast<int>(tuple.size()) < min || (max != Expr::kUnbounded && static_cast<int>(tuple.size()) > max))
        return Bad(path, "'prefixItems' with 'minItems'/'maxItems' other than its length is not supported");
      std::vector<Expr> parts = {Lit("[")};
      for (std::size_t i = 0; i < tuple.size(); ++i) {
        if (i > 0) parts.push_back(Sep(','));
        RS_ASSIGN_OR_RETURN(Expr e, Value(tuple[i], path + "/prefixItems/" + std::to_string(i)));
        parts.push_back(std::move(e));
      }
      parts.push_back(Lit("]"));
      return Expr::Seq(std::move(parts));
    }
    Expr item = AnyValue(kAnyValueDepth - 1);
    if (s.contains("items")) {
      RS_ASSIGN_OR_RETURN(item, Value(s["items"], path + "/items"));
    }
    return Expr::Seq({Lit("["), Expr::SepBy(item, Sep(','), min, max), Lit("]")});
  }

  StatusOr<Expr> Object(const json& s, const std::string& path) {
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) return Bad(path, "'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Bad(path, "'required' must be an array of strings");
      for (const json& r : s["required"]) {
        if (!r.is_string()) return Bad(path, "'required' must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    const bool closed = s.contains("additionalProperties") && s["additionalProperties"].is_boolean() &&
                        !s["additionalProperties"].get<bool>();
    if (props.empty() && required.empty()) {
      if (closed) return Lit("{}");
      // A map: any keys, values from additionalProperties.
      Expr value = AnyValue(kAnyValueDepth - 1);
      if (s.contains("additionalProperties") && s["additionalProperties"].is_object()) {
        RS_ASSIGN_OR_RETURN(value, Value(s["additionalProperties"], path + "/additionalProperties"));
      }
      return Expr::Seq({Lit("{"),
                        Expr::SepBy(Expr::Seq({JsonStringExpr(), Sep(':'), value}), Sep(','), 0, Expr::kUnbounded),
                        Lit("}")});
    }
    struct Member {
      Expr expr;
      bool required;
    };
    std::vector<Member> members;
    for (const auto& [name, schema] : props.items()) {
      RS_ASSIGN_OR_RETURN(Expr v, Value(schema, path + "/properties/" + name));
      members.push_back({Expr::Seq({Lit(json(name).dump()), Sep(':'), std::move(v)}), required.count(name) > 0});
    }
    for (const std::string& name : required) {
      if (props.contains(name)) continue;
      if (closed) return Bad(path, "required property '" + name + "' is not allowed by additionalProperties: false");
      members.push_back({Expr::Seq({Lit(json(name).dump()), Sep(':'), AnyValue(kAnyValueDepth - 1)}), true});
    }
    // Members in order, optional ones skippable, commas between those
    // present. after[i]: members i.. when one was written before;
    // first[i]: when none was.
    const std::size_t n = members.size();
    std::vector<Expr> after(n + 1, Expr::Empty()), first(n + 1, Expr::Empty());
    for (std::size_t k = n; k-- > 0;) {
      const Expr with_comma = Expr::Seq({Sep(','), members[k].expr});
      after[k] = Expr::Seq({members[k].required ? with_comma : Expr::Optional(with_comma), after[k + 1]});
      const Expr here = Expr::Seq({members[k].expr, after[k + 1]});
      first[k] = members[k].required ? here : Expr::Alt({here, first[k + 1]});
    }
    return Expr::Seq({Lit("{"), first[0], Lit("}")});
  }

  static constexpr int kMaxSchemaDepth = 64;
  const json& root_;
  std::unordered_map<std::string, int> ref_depth_;
  int depth_ = 0;
};

}  // namespace

Expr JsonStringExpr(int min_chars, int max_chars) {
  return Expr::Seq({Lit("\""), Expr::Repeat(JsonChar(), min_chars, max_chars), Lit("\"")});
}

StatusOr<Expr> JsonSchemaExpr(const json& schema) { return Compiler(schema).Value(schema, "#"); }

Expr AnyJsonObjectExpr() {
  const Expr inner = AnyValue(kAnyValueDepth - 1);
  return Expr::Seq(
      {Lit("{"), Expr::SepBy(Expr::Seq({JsonStringExpr(), Sep(':'), inner}), Sep(','), 0, Expr::kUnbounded), Lit("}")});
}

}  // namespace ropeserve::structured
