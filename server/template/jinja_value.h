// The Jinja interpreter's values (Python-like: none, bool, int, float,
// str, list, dict in insertion order, callables), their conversions and
// comparisons, and the string helpers the filters and methods share.
// Internal to server/template.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ropeserve::jinja::detail {

// Errors inside parsing and rendering unwind with an exception that never
// leaves this file: Parse and Render turn it into a Status.
struct JinjaError {
  std::string message;
  bool raised_by_template = false;  // raise_exception(...)
};
[[noreturn]] inline void Throw(std::string m) { throw JinjaError{std::move(m), false}; }

// ------------------------------------------------------------------ values

struct Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion order, like Python dicts
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};
using Function = std::function<Value(Args&)>;

struct Value {
  enum Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kFunction };
  Kind kind = kUndefined;
  bool b = false;
  std::int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<Array> arr;
  std::shared_ptr<Object> obj;
  std::shared_ptr<Function> fn;

  static Value None() {
    Value v;
    v.kind = kNone;
    return v;
  }
  static Value Bool(bool x) {
    Value v;
    v.kind = kBool;
    v.b = x;
    return v;
  }
  static Value Int(std::int64_t x) {
    Value v;
    v.kind = kInt;
    v.i = x;
    return v;
  }
  static Value Float(double x) {
    Value v;
    v.kind = kFloat;
    v.f = x;
    return v;
  }
  static Value Str(std::string x) {
    Value v;
    v.kind = kString;
    v.s = std::move(x);
    return v;
  }
  static Value List(Array a = {}) {
    Value v;
    v.kind = kArray;
    v.arr = std::make_shared<Array>(std::move(a));
    return v;
  }
  static Value Dict(Object o = {}) {
    Value v;
    v.kind = kObject;
    v.obj = std::make_shared<Object>(std::move(o));
    return v;
  }
  static Value Fn(Function f) {
    Value v;
    v.kind = kFunction;
    v.fn = std::make_shared<Function>(std::move(f));
    return v;
  }

  bool undefined() const { return kind == kUndefined; }
  bool number() const { return kind == kInt || kind == kFloat || kind == kBool; }
  double AsDouble() const { return kind == kFloat ? f : kind == kBool ? (b ? 1 : 0) : static_cast<double>(i); }
  bool Truthy() const {
    switch (kind) {
      case kUndefined:
      case kNone:
        return false;
      case kBool:
        return b;
      case kInt:
        return i != 0;
      case kFloat:
        return f != 0;
      case kString:
        return !s.empty();
      case kArray:
        return !arr->empty();
      case kObject:
        return !obj->empty();
      case kFunction:
        return true;
    }
    return false;
  }
  const Value* Find(const std::string& key) const {
    if (kind != kObject) return nullptr;
    for (const auto& [k, v] : *obj)
      if (k == key) return &v;
    return nullptr;
  }
  void Set(const std::string& key, Value v) {
    for (auto& [k, old] : *obj)
      if (k == key) {
        old = std::move(v);
        return;
      }
    obj->emplace_back(key, std::move(v));
  }
};

const char* KindName(const Value& v);
Value FromJson(const nlohmann::ordered_json& j);
std::string FloatRepr(double d);
std::string ToStr(const Value& v);
std::string PyStrRepr(const std::string& s);
std::string Repr(const Value& v);
void JsonString(std::string& out, const std::string& s);
void ToJson(std::string& out, const Value& v, int indent, int depth);
bool Equal(const Value& a, const Value& b);
int Compare(const Value& a, const Value& b);
std::u32string U32(const std::string& s);
std::string U8(const std::u32string& s);
std::string MapCase(const std::string& s, int mode);  // 0 lower, 1 upper, 2 title, 3 capitalize
std::string StripChars(const std::string& s, const Value* chars, bool left, bool right);
Value SplitString(const std::string& s, const Value* sep, std::int64_t maxsplit);
std::string ReplaceAll(const std::string& s, const std::string& from, const std::string& to, std::int64_t count);

template <typename Seq>
Seq SliceSeq(const Seq& seq, std::optional<std::int64_t> start, std::optional<std::int64_t> stop,
             std::optional<std::int64_t> step_opt) {
  const std::int64_t n = static_cast<std::int64_t>(seq.size());
  const std::int64_t step = step_opt.value_or(1);
  if (step == 0) Throw("slice step cannot be zero");
  auto clamp = [&](std::optional<std::int64_t> v, std::int64_t def, bool is_start) {
    if (!v) return def;
    std::int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<std::int64_t>(x, 0, n);
    return std::clamp<std::int64_t>(x, -1, n - 1);
    (void)is_start;
  };
  Seq out;
  if (step > 0) {
    const std::int64_t b = clamp(start, 0, true), e = clamp(stop, n, false);
    for (std::int64_t k = b; k < e; k += step) out.push_back(seq[static_cast<size_t>(k)]);
  } else {
    const std::int64_t b = clamp(start, n - 1, true), e = clamp(stop, -1, false);
    for (std::int64_t k = b; k > e; k += step) out.push_back(seq[static_cast<size_t>(k)]);
  }
  return out;
}

}  // namespace ropeserve::jinja::detail
