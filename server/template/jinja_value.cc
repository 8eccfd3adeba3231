#include "server/template/jinja_value.h"

#include <cmath>
#include <cstdio>

#include "server/tokenizer/unicode.h"

namespace ropeserve::jinja::detail {

const char* KindName(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
      return "undefined";
    case Value::kNone:
      return "none";
    case Value::kBool:
      return "boolean";
    case Value::kInt:
      return "integer";
    case Value::kFloat:
      return "float";
    case Value::kString:
      return "string";
    case Value::kArray:
      return "list";
    case Value::kObject:
      return "dict";
    case Value::kFunction:
      return "function";
  }
  return "?";
}

Value FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::Int(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::Str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      for (const auto& e : j) a.push_back(FromJson(e));
      return Value::List(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object o;
      for (auto it = j.begin(); it != j.end(); ++it) o.emplace_back(it.key(), FromJson(it.value()));
      return Value::Dict(std::move(o));
    }
    default:
      return Value();
  }
}

// Python's repr() of a float: the shortest digits that round-trip.
std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  // Python switches to exponent notation at 1e16 and below 1e-4.
  if (s.find('e') != std::string::npos) {
    const double a = std::fabs(d);
    if (a >= 1e-4 && a < 1e16) {
      std::snprintf(buf, sizeof buf, "%.17f", d);
      s = buf;
      while (!s.empty() && s.back() == '0') s.pop_back();
    } else {
      // "1e+20" -> "1e+20" (Python prints 1e+20), mantissa keeps no ".0"
      return s;
    }
  }
  if (s.find('.') == std::string::npos) s += ".0";
  if (s.back() == '.') s += "0";
  return s;
}

std::string Repr(const Value& v);

std::string ToStr(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
      return "";
    case Value::kNone:
      return "None";
    case Value::kBool:
      return v.b ? "True" : "False";
    case Value::kInt:
      return std::to_string(v.i);
    case Value::kFloat:
      return FloatRepr(v.f);
    case Value::kString:
      return v.s;
    default:
      return Repr(v);
  }
}

std::string PyStrRepr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else
      out += c;
  }
  out += q;
  return out;
}

std::string Repr(const Value& v) {
  switch (v.kind) {
    case Value::kString:
      return PyStrRepr(v.s);
    case Value::kArray: {
      std::string out = "[";
      for (size_t k = 0; k < v.arr->size(); ++k) out += (k ? ", " : "") + Repr((*v.arr)[k]);
      return out + "]";
    }
    case Value::kObject: {
      std::string out = "{";
      for (size_t k = 0; k < v.obj->size(); ++k) {
        out += (k ? ", " : "") + PyStrRepr((*v.obj)[k].first) + ": " + Repr((*v.obj)[k].second);
      }
      return out + "}";
    }
    case Value::kFunction:
      return "<function>";
    default:
      return ToStr(v);
  }
}

// json.dumps(x, ensure_ascii=False, indent=indent) as transformers' tojson.
void JsonString(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void ToJson(std::string& out, const Value& v, int indent, int depth) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.kind) {
    case Value::kUndefined:
    case Value::kNone:
      out += "null";
      return;
    case Value::kBool:
      out += v.b ? "true" : "false";
      return;
    case Value::kInt:
      out += std::to_string(v.i);
      return;
    case Value::kFloat:
      out += FloatRepr(v.f);
      return;
    case Value::kString:
      JsonString(out, v.s);
      return;
    case Value::kFunction:
      Throw("tojson: cannot serialize a function");
    case Value::kArray: {
      if (v.arr->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.arr->size(); ++k) {
        if (k) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        ToJson(out, (*v.arr)[k], indent, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::kObject: {
      if (v.obj->empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t k = 0; k < v.obj->size(); ++k) {
        if (k) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        JsonString(out, (*v.obj)[k].first);
        out += ": ";
        ToJson(out, (*v.obj)[k].second, indent, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
  }
}

bool Equal(const Value& a, const Value& b) {
  if (a.number() && b.number()) {
    if (a.kind == Value::kFloat || b.kind == Value::kFloat) return a.AsDouble() == b.AsDouble();
    return (a.kind == Value::kBool ? a.b : a.i) == (b.kind == Value::kBool ? b.b : b.i);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::kUndefined:
    case Value::kNone:
      return true;
    case Value::kString:
      return a.s == b.s;
    case Value::kArray:
      if (a.arr->size() != b.arr->size()) return false;
      for (size_t k = 0; k < a.arr->size(); ++k)
        if (!Equal((*a.arr)[k], (*b.arr)[k])) return false;
      return true;
    case Value::kObject:
      if (a.obj->size() != b.obj->size()) return false;
      for (const auto& [k, v] : *a.obj) {
        const Value* o = b.Find(k);
        if (!o || !Equal(v, *o)) return false;
      }
      return true;
    case Value::kFunction:
      return a.fn == b.fn;
    default:
      return false;
  }
}

int Compare(const Value& a, const Value& b) {
  if (a.number() && b.number()) {
    const double x = a.AsDouble(), y = b.AsDouble();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind == Value::kString && b.kind == Value::kString) return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;
  if (a.kind == Value::kArray && b.kind == Value::kArray) {
    for (size_t k = 0; k < std::min(a.arr->size(), b.arr->size()); ++k) {
      const int c = Compare((*a.arr)[k], (*b.arr)[k]);
      if (c) return c;
    }
    return a.arr->size() < b.arr->size() ? -1 : a.arr->size() > b.arr->size() ? 1 : 0;
  }
  Throw(std::string("cannot compare ") + KindName(a) + " with " + KindName(b));
}

// ----------------------------------------------------------- string helpers

std::u32string U32(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    size_t n;
    out.push_back(tok::DecodeUtf8(s, i, &n));
    i += n;
  }
  return out;
}
std::string U8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) tok::AppendUtf8(&out, c);
  return out;
}

std::string StripChars(const std::string& s, const Value* chars, bool left, bool right) {
  const std::u32string u = U32(s);
  std::u32string set;
  const bool ws = chars == nullptr || chars->kind == Value::kNone || chars->undefined();
  if (!ws) set = U32(chars->s);
  auto strip = [&](char32_t c) { return ws ? tok::IsWhitespace(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip(u[b])) ++b;
  if (right)
    while (e > b && strip(u[e - 1])) --e;
  return U8(u.substr(b, e - b));
}

std::string MapCase(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  std::u32string u = U32(s);
  bool prev_cased = false;
  for (size_t k = 0; k < u.size(); ++k) {
    const char32_t c = u[k];
    bool upper;
    if (mode == 0)
      upper = false;
    else if (mode == 1)
      upper = true;
    else if (mode == 2)
      upper = !prev_cased;
    else
      upper = k == 0;
    const std::u32string m = upper ? tok::ToUppercase(c) : tok::ToLowercase(c);
    u[k] = m.empty() ? c : m[0];
    prev_cased = tok::IsAlphabetic(c);
  }
  return U8(u);
}

Value SplitString(const std::string& s, const Value* sep, std::int64_t maxsplit) {
  Array out;
  if (sep == nullptr || sep->kind == Value::kNone) {
    const std::u32string u = U32(s);
    size_t k = 0;
    while (k < u.size()) {
      while (k < u.size() && tok::IsWhitespace(u[k])) ++k;
      if (k >= u.size()) break;
      size_t e = k;
      if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
        std::u32string rest = u.substr(k);
        while (!rest.empty() && tok::IsWhitespace(rest.back())) rest.pop_back();
        out.push_back(Value::Str(U8(rest)));
        break;
      }
      while (e < u.size() && !tok::IsWhitespace(u[e])) ++e;
      out.push_back(Value::Str(U8(u.substr(k, e - k))));
      k = e;
    }
    return Value::List(std::move(out));
  }
  if (sep->kind != Value::kString || sep->s.empty()) Throw("split: separator must be a non-empty string");
  size_t pos = 0, hit;
  while ((maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) &&
         (hit = s.find(sep->s, pos)) != std::string::npos) {
    out.push_back(Value::Str(s.substr(pos, hit - pos)));
    pos = hit + sep->s.size();
  }
  out.push_back(Value::Str(s.substr(pos)));
  return Value::List(std::move(out));
}

std::string ReplaceAll(const std::string& s, const std::string& from, const std::string& to, std::int64_t count) {
  if (from.empty()) {
    std::string out;
    const std::u32string u = U32(s);
    std::int64_t n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      tok::AppendUtf8(&out, c);
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  std::string out;
  size_t pos = 0, hit;
  std::int64_t n = 0;
  while ((count < 0 || n < count) && (hit = s.find(from, pos)) != std::string::npos) {
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// Python slicing semantics for lists and strings (by code point).

}  // namespace ropeserve::jinja::detail
