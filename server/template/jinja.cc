#include "server/template/jinja.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <variant>

#include "server/tokenizer/unicode.h"

namespace ropeserve::jinja {

namespace {

// Errors inside parsing and rendering unwind with an exception that never
// leaves this file: Parse and Render turn it into a Status.
struct JinjaError {
  std::string message;
  bool raised_by_template = false;  // raise_exception(...)
};
[[noreturn]] void Throw(std::string m) { throw JinjaError{std::move(m), false}; }

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
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<Array> arr;
  std::shared_ptr<Object> obj;
  std::shared_ptr<Function> fn;

  static Value None() { Value v; v.kind = kNone; return v; }
  static Value Bool(bool x) { Value v; v.kind = kBool; v.b = x; return v; }
  static Value Int(int64_t x) { Value v; v.kind = kInt; v.i = x; return v; }
  static Value Float(double x) { Value v; v.kind = kFloat; v.f = x; return v; }
  static Value Str(std::string x) { Value v; v.kind = kString; v.s = std::move(x); return v; }
  static Value List(Array a = {}) { Value v; v.kind = kArray; v.arr = std::make_shared<Array>(std::move(a)); return v; }
  static Value Dict(Object o = {}) { Value v; v.kind = kObject; v.obj = std::make_shared<Object>(std::move(o)); return v; }
  static Value Fn(Function f) { Value v; v.kind = kFunction; v.fn = std::make_shared<Function>(std::move(f)); return v; }

  bool undefined() const { return kind == kUndefined; }
  bool number() const { return kind == kInt || kind == kFloat || kind == kBool; }
  double AsDouble() const { return kind == kFloat ? f : kind == kBool ? (b ? 1 : 0) : static_cast<double>(i); }
  bool Truthy() const {
    switch (kind) {
      case kUndefined: case kNone: return false;
      case kBool: return b;
      case kInt: return i != 0;
      case kFloat: return f != 0;
      case kString: return !s.empty();
      case kArray: return !arr->empty();
      case kObject: return !obj->empty();
      case kFunction: return true;
    }
    return false;
  }
  const Value* Find(const std::string& key) const {
    if (kind != kObject) return nullptr;
    for (const auto& [k, v] : *obj) if (k == key) return &v;
    return nullptr;
  }
  void Set(const std::string& key, Value v) {
    for (auto& [k, old] : *obj) if (k == key) { old = std::move(v); return; }
    obj->emplace_back(key, std::move(v));
  }
};

const char* KindName(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined: return "undefined";
    case Value::kNone: return "none";
    case Value::kBool: return "boolean";
    case Value::kInt: return "integer";
    case Value::kFloat: return "float";
    case Value::kString: return "string";
    case Value::kArray: return "list";
    case Value::kObject: return "dict";
    case Value::kFunction: return "function";
  }
  return "?";
}

Value FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::None();
    case nlohmann::ordered_json::value_t::boolean: return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::Str(j.get<std::string>());
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
    default: return Value();
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
    case Value::kUndefined: return "";
    case Value::kNone: return "None";
    case Value::kBool: return v.b ? "True" : "False";
    case Value::kInt: return std::to_string(v.i);
    case Value::kFloat: return FloatRepr(v.f);
    case Value::kString: return v.s;
    default: return Repr(v);
  }
}

std::string PyStrRepr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') { out += '\\'; out += c; }
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  out += q;
  return out;
}

std::string Repr(const Value& v) {
  switch (v.kind) {
    case Value::kString: return PyStrRepr(v.s);
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
    case Value::kFunction: return "<function>";
    default: return ToStr(v);
  }
}

// json.dumps(x, ensure_ascii=False, indent=indent) as transformers' tojson.
void JsonString(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
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
    case Value::kUndefined: case Value::kNone: out += "null"; return;
    case Value::kBool: out += v.b ? "true" : "false"; return;
    case Value::kInt: out += std::to_string(v.i); return;
    case Value::kFloat: out += FloatRepr(v.f); return;
    case Value::kString: JsonString(out, v.s); return;
    case Value::kFunction: Throw("tojson: cannot serialize a function");
    case Value::kArray: {
      if (v.arr->empty()) { out += "[]"; return; }
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
      if (v.obj->empty()) { out += "{}"; return; }
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
    case Value::kUndefined: case Value::kNone: return true;
    case Value::kString: return a.s == b.s;
    case Value::kArray:
      if (a.arr->size() != b.arr->size()) return false;
      for (size_t k = 0; k < a.arr->size(); ++k) if (!Equal((*a.arr)[k], (*b.arr)[k])) return false;
      return true;
    case Value::kObject:
      if (a.obj->size() != b.obj->size()) return false;
      for (const auto& [k, v] : *a.obj) {
        const Value* o = b.Find(k);
        if (!o || !Equal(v, *o)) return false;
      }
      return true;
    case Value::kFunction: return a.fn == b.fn;
    default: return false;
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
  if (left) while (b < e && strip(u[b])) ++b;
  if (right) while (e > b && strip(u[e - 1])) --e;
  return U8(u.substr(b, e - b));
}

std::string MapCase(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  std::u32string u = U32(s);
  bool prev_cased = false;
  for (size_t k = 0; k < u.size(); ++k) {
    const char32_t c = u[k];
    bool upper;
    if (mode == 0) upper = false;
    else if (mode == 1) upper = true;
    else if (mode == 2) upper = !prev_cased;
    else upper = k == 0;
    const std::u32string m = upper ? tok::ToUppercase(c) : tok::ToLowercase(c);
    u[k] = m.empty() ? c : m[0];
    prev_cased = tok::IsAlphabetic(c);
  }
  return U8(u);
}

Value SplitString(const std::string& s, const Value* sep, int64_t maxsplit) {
  Array out;
  if (sep == nullptr || sep->kind == Value::kNone) {
    const std::u32string u = U32(s);
    size_t k = 0;
    while (k < u.size()) {
      while (k < u.size() && tok::IsWhitespace(u[k])) ++k;
      if (k >= u.size()) break;
      size_t e = k;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
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
  while ((maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) &&
         (hit = s.find(sep->s, pos)) != std::string::npos) {
    out.push_back(Value::Str(s.substr(pos, hit - pos)));
    pos = hit + sep->s.size();
  }
  out.push_back(Value::Str(s.substr(pos)));
  return Value::List(std::move(out));
}

std::string ReplaceAll(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) {
    std::string out;
    const std::u32string u = U32(s);
    int64_t n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) { out += to; ++n; }
      tok::AppendUtf8(&out, c);
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  std::string out;
  size_t pos = 0, hit;
  int64_t n = 0;
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
template <typename Seq>
Seq SliceSeq(const Seq& seq, std::optional<int64_t> start, std::optional<int64_t> stop, std::optional<int64_t> step_opt) {
  const int64_t n = static_cast<int64_t>(seq.size());
  const int64_t step = step_opt.value_or(1);
  if (step == 0) Throw("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t def, bool is_start) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
    (void)is_start;
  };
  Seq out;
  if (step > 0) {
    const int64_t b = clamp(start, 0, true), e = clamp(stop, n, false);
    for (int64_t k = b; k < e; k += step) out.push_back(seq[static_cast<size_t>(k)]);
  } else {
    const int64_t b = clamp(start, n - 1, true), e = clamp(stop, -1, false);
    for (int64_t k = b; k > e; k += step) out.push_back(seq[static_cast<size_t>(k)]);
  }
  return out;
}

// ------------------------------------------------------------------ lexing

enum class Tk { kName, kString, kInt, kFloat, kOp, kEnd };
struct Token {
  Tk kind;
  std::string text;
  int line;
};

std::vector<Token> LexExpression(const std::string& src, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < src.size()) {
    const char c = src[i];
    if (c == '\n') { ++line; ++i; continue; }
    if (std::isspace(static_cast<unsigned char>(c))) { ++i; continue; }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = i;
      while (e < src.size() && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
      out.push_back({Tk::kName, src.substr(i, e - i), line});
      i = e;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t e = i;
      bool is_float = false;
      while (e < src.size() && (std::isdigit(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
      if (e + 1 < src.size() && src[e] == '.' && std::isdigit(static_cast<unsigned char>(src[e + 1]))) {
        is_float = true;
        ++e;
        while (e < src.size() && std::isdigit(static_cast<unsigned char>(src[e]))) ++e;
      }
      if (e < src.size() && (src[e] == 'e' || src[e] == 'E')) {
        size_t k = e + 1;
        if (k < src.size() && (src[k] == '+' || src[k] == '-')) ++k;
        if (k < src.size() && std::isdigit(static_cast<unsigned char>(src[k]))) {
          is_float = true;
          e = k;
          while (e < src.size() && std::isdigit(static_cast<unsigned char>(src[e]))) ++e;
        }
      }
      std::string num = src.substr(i, e - i);
      num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
      out.push_back({is_float ? Tk::kFloat : Tk::kInt, num, line});
      i = e;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string s;
      size_t e = i + 1;
      for (; e < src.size() && src[e] != c; ++e) {
        if (src[e] == '\n') ++line;
        if (src[e] == '\\' && e + 1 < src.size()) {
          const char x = src[++e];
          switch (x) {
            case 'n': s += '\n'; break;
            case 't': s += '\t'; break;
            case 'r': s += '\r'; break;
            case '\\': s += '\\'; break;
            case '\'': s += '\''; break;
            case '"': s += '"'; break;
            case '0': s += '\0'; break;
            case 'u': case 'x': {
              const size_t digits = x == 'u' ? 4 : 2;
              if (e + digits >= src.size() + 0 && e + digits > src.size() - 1) Throw("line " + std::to_string(line) + ": bad escape");
              const std::string hex = src.substr(e + 1, digits);
              char* endp = nullptr;
              const long cp = std::strtol(hex.c_str(), &endp, 16);
              if (endp != hex.c_str() + digits) Throw("line " + std::to_string(line) + ": bad \\" + std::string(1, x) + " escape");
              tok::AppendUtf8(&s, static_cast<char32_t>(cp));
              e += digits;
              break;
            }
            default: s += '\\'; s += x;
          }
        } else {
          s += src[e];
        }
      }
      if (e >= src.size()) Throw("line " + std::to_string(line) + ": unterminated string literal");
      out.push_back({Tk::kString, std::move(s), line});
      i = e + 1;
      continue;
    }
    static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                 "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", "="};
    bool matched = false;
    for (const char* op : kOps) {
      const size_t n = std::strlen(op);
      if (src.compare(i, n, op) == 0) {
        out.push_back({Tk::kOp, op, line});
        i += n;
        matched = true;
        break;
      }
    }
    if (!matched) Throw("line " + std::to_string(line) + ": unexpected character '" + std::string(1, c) + "'");
  }
  out.push_back({Tk::kEnd, "", line});
  return out;
}

// ------------------------------------------------------------- expressions

struct Expr {
  enum Kind { kLiteral, kName, kList, kTuple, kDict, kAttr, kIndex, kSlice, kCall, kFilter, kTest,
              kNeg, kPos, kNot, kAnd, kOr, kBinary, kCompare, kCond };
  Kind kind;
  Value literal;
  std::string name;  // name, attribute, filter/test, operator
  std::vector<std::unique_ptr<Expr>> kids;
  std::vector<std::string> kw;  // keyword names of the trailing kids (calls/filters/tests)
  bool negated = false;
  int line = 0;
};
using ExprPtr = std::unique_ptr<Expr>;

ExprPtr Make(Expr::Kind k, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->line = line;
  return e;
}

// Nesting limits: templates are data, and deep nesting must be an error,
// not a stack overflow.
constexpr int kMaxNesting = 200;

class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> toks) : t_(std::move(toks)) {}
  // Counts recursion into sub-expressions.
  struct Depth {
    explicit Depth(ExprParser* p) : p_(p) {
      if (++p_->depth_ > kMaxNesting) p_->Fail("expression nested too deeply");
    }
    ~Depth() { --p_->depth_; }
    ExprParser* p_;
  };
  const Token& Peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  bool AtEnd() const { return Peek().kind == Tk::kEnd; }
  bool IsOp(const char* op, size_t k = 0) const { return Peek(k).kind == Tk::kOp && Peek(k).text == op; }
  bool IsName(const char* n, size_t k = 0) const { return Peek(k).kind == Tk::kName && Peek(k).text == n; }
  Token Next() { return t_[p_ < t_.size() - 1 ? p_++ : p_]; }
  [[noreturn]] void Fail(const std::string& m) const { Throw("line " + std::to_string(Peek().line) + ": " + m); }
  void Expect(const char* op) {
    if (!IsOp(op)) Fail(std::string("expected '") + op + "', found '" + Peek().text + "'");
    ++p_;
  }
  std::string ExpectName() {
    if (Peek().kind != Tk::kName) Fail("expected a name, found '" + Peek().text + "'");
    return Next().text;
  }

  ExprPtr ParseExprNoCond() { return ParseOr(); }

  // Top level: a tuple without parentheses is allowed ("a, b").
  ExprPtr ParseTupleOrExpr() {
    ExprPtr first = ParseExpr();
    if (!IsOp(",")) return first;
    auto t = Make(Expr::kTuple, first->line);
    t->kids.push_back(std::move(first));
    while (IsOp(",")) {
      ++p_;
      if (AtEnd() || IsOp(")") || IsOp("]")) break;
      t->kids.push_back(ParseExpr());
    }
    return t;
  }

  ExprPtr ParseExpr() {
    Depth guard(this);
    ExprPtr e = ParseOr();
    if (IsName("if")) {
      ++p_;
      auto c = Make(Expr::kCond, e->line);
      ExprPtr cond = ParseOr();
      ExprPtr other;
      if (IsName("else")) {
        ++p_;
        other = ParseExpr();
      } else {
        other = Make(Expr::kLiteral, e->line);  // undefined
      }
      c->kids.push_back(std::move(e));
      c->kids.push_back(std::move(cond));
      c->kids.push_back(std::move(other));
      return c;
    }
    return e;
  }

 private:
  ExprPtr Binary(Expr::Kind k, ExprPtr a, ExprPtr b, const std::string& op = "") {
    auto e = Make(k, a->line);
    e->name = op;
    e->kids.push_back(std::move(a));
    e->kids.push_back(std::move(b));
    return e;
  }
  ExprPtr ParseOr() {
    ExprPtr e = ParseAnd();
    while (IsName("or")) { ++p_; e = Binary(Expr::kOr, std::move(e), ParseAnd()); }
    return e;
  }
  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (IsName("and")) { ++p_; e = Binary(Expr::kAnd, std::move(e), ParseNot()); }
    return e;
  }
  ExprPtr ParseNot() {
    Depth guard(this);
    if (IsName("not")) {
      const int line = Peek().line;
      ++p_;
      auto e = Make(Expr::kNot, line);
      e->kids.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    ExprPtr e = ParseConcat();
    for (;;) {
      std::string op;
      if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++p_;
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        p_ += 2;
        op = "not in";
      } else {
        break;
      }
      e = Binary(Expr::kCompare, std::move(e), ParseConcat(), op);
    }
    return e;
  }
  ExprPtr ParseConcat() {
    ExprPtr e = ParseAdd();
    while (IsOp("~")) { ++p_; e = Binary(Expr::kBinary, std::move(e), ParseAdd(), "~"); }
    return e;
  }
  ExprPtr ParseAdd() {
    ExprPtr e = ParseMul();
    while (IsOp("+") || IsOp("-")) {
      const std::string op = Next().text;
      e = Binary(Expr::kBinary, std::move(e), ParseMul(), op);
    }
    return e;
  }
  ExprPtr ParseMul() {
    ExprPtr e = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const std::string op = Next().text;
      e = Binary(Expr::kBinary, std::move(e), ParsePow(), op);
    }
    return e;
  }
  ExprPtr ParsePow() {
    ExprPtr e = ParseUnary();
    while (IsOp("**")) { ++p_; e = Binary(Expr::kBinary, std::move(e), ParseUnary(), "**"); }
    return e;
  }
  // As Jinja2: "-x | f" is "(-x) | f"; filters bind tighter than binary
  // operators.
  ExprPtr ParseUnary(bool with_filters = true) {
    Depth guard(this);
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      const Token t = Next();
      e = Make(t.text == "-" ? Expr::kNeg : Expr::kPos, t.line);
      e->kids.push_back(ParseUnary(false));
    } else {
      e = ParsePostfix(ParsePrimary());
    }
    return with_filters ? ParseFilters(std::move(e)) : std::move(e);
  }
  void ParseCallArgs(Expr* e) {
    // '(' already consumed
    std::vector<ExprPtr> pos, kwv;
    while (!IsOp(")")) {
      if (Peek().kind == Tk::kName && IsOp("=", 1)) {
        e->kw.push_back(Next().text);
        ++p_;
        kwv.push_back(ParseExpr());
      } else {
        if (!kwv.empty()) Fail("positional argument after keyword argument");
        pos.push_back(ParseExpr());
      }
      if (!IsOp(",")) break;
      ++p_;
    }
    Expect(")");
    for (auto& x : pos) e->kids.push_back(std::move(x));
    for (auto& x : kwv) e->kids.push_back(std::move(x));
  }
  ExprPtr ParseFilters(ExprPtr e) {
    for (;;) {
      if (IsOp("|")) {
        ++p_;
        auto f = Make(Expr::kFilter, e->line);
        f->name = ExpectName();
        while (IsOp(".")) { ++p_; f->name += "." + ExpectName(); }
        f->kids.push_back(std::move(e));
        if (IsOp("(")) { ++p_; ParseCallArgs(f.get()); }
        e = std::move(f);
      } else if (IsName("is")) {
        ++p_;
        auto t = Make(Expr::kTest, e->line);
        if (IsName("not")) { ++p_; t->negated = true; }
        if (Peek().kind == Tk::kName) {
          t->name = Next().text;
        } else if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">=")) {
          t->name = Next().text;
        } else {
          Fail("expected a test name after 'is'");
        }
        t->kids.push_back(std::move(e));
        if (IsOp("(")) {
          ++p_;
          ParseCallArgs(t.get());
        } else if (!AtEnd() && (Peek().kind == Tk::kString || Peek().kind == Tk::kInt || Peek().kind == Tk::kFloat ||
                                (Peek().kind == Tk::kName && !IsName("and") && !IsName("or") && !IsName("else") &&
                                 !IsName("if") && !IsName("is") && !IsName("in") && !IsName("not")))) {
          // "is divisibleby 3", "is sameas none": one argument without parentheses
          t->kids.push_back(ParsePostfix(ParsePrimary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }
  ExprPtr ParsePostfix(ExprPtr e) {
    for (;;) {
      if (IsOp(".")) {
        ++p_;
        auto a = Make(Expr::kAttr, e->line);
        if (Peek().kind == Tk::kInt) a->name = Next().text;
        else a->name = ExpectName();
        a->kids.push_back(std::move(e));
        e = std::move(a);
      } else if (IsOp("[")) {
        ++p_;
        ExprPtr parts[3];
        bool is_slice = false;
        int idx = 0;
        while (!IsOp("]")) {
          if (IsOp(":")) {
            is_slice = true;
            ++p_;
            if (++idx > 2) Fail("too many ':' in a slice");
            continue;
          }
          if (parts[idx]) Fail("expected ']' or ':'");
          parts[idx] = ParseExpr();
        }
        Expect("]");
        if (is_slice) {
          auto s = Make(Expr::kSlice, e->line);
          s->kids.push_back(std::move(e));
          for (auto& part : parts) s->kids.push_back(part ? std::move(part) : nullptr);
          e = std::move(s);
        } else {
          if (!parts[0]) Fail("empty subscript");
          auto ix = Make(Expr::kIndex, e->line);
          ix->kids.push_back(std::move(e));
          ix->kids.push_back(std::move(parts[0]));
          e = std::move(ix);
        }
      } else if (IsOp("(")) {
        ++p_;
        auto c = Make(Expr::kCall, e->line);
        c->kids.push_back(std::move(e));
        ParseCallArgs(c.get());
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprPtr ParsePrimary() {
    const Token t = Next();
    auto lit = [&](Value v) {
      auto e = Make(Expr::kLiteral, t.line);
      e->literal = std::move(v);
      return e;
    };
    switch (t.kind) {
      case Tk::kString: {
        std::string s = t.text;
        while (Peek().kind == Tk::kString) s += Next().text;  // adjacent literals concatenate
        return lit(Value::Str(std::move(s)));
      }
      case Tk::kInt: {
        errno = 0;
        const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) Fail("integer literal too large");
        return lit(Value::Int(v));
      }
      case Tk::kFloat: return lit(Value::Float(std::strtod(t.text.c_str(), nullptr)));
      case Tk::kName: {
        if (t.text == "true" || t.text == "True") return lit(Value::Bool(true));
        if (t.text == "false" || t.text == "False") return lit(Value::Bool(false));
        if (t.text == "none" || t.text == "None") return lit(Value::None());
        auto e = Make(Expr::kName, t.line);
        e->name = t.text;
        return e;
      }
      case Tk::kOp:
        if (t.text == "(") {
          if (IsOp(")")) { ++p_; return Make(Expr::kTuple, t.line); }
          ExprPtr inner = ParseTupleOrExpr();
          Expect(")");
          return inner;
        }
        if (t.text == "[") {
          auto e = Make(Expr::kList, t.line);
          while (!IsOp("]")) {
            e->kids.push_back(ParseExpr());
            if (!IsOp(",")) break;
            ++p_;
          }
          Expect("]");
          return e;
        }
        if (t.text == "{") {
          auto e = Make(Expr::kDict, t.line);
          while (!IsOp("}")) {
            e->kids.push_back(ParseExpr());
            Expect(":");
            e->kids.push_back(ParseExpr());
            if (!IsOp(",")) break;
            ++p_;
          }
          Expect("}");
          return e;
        }
        break;
      default: break;
    }
    Throw("line " + std::to_string(t.line) + ": unexpected '" + t.text + "' in expression");
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  int depth_ = 0;
};

}  // namespace

// -------------------------------------------------------------- statements

struct Node {
  enum Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kBlock };
  Kind kind;
  std::string text;                       // text / set target name / macro name
  std::vector<std::string> targets;       // for loop variables, set targets
  std::string attr;                       // set ns.attr
  std::vector<ExprPtr> exprs;             // conditions, iterable, value...
  std::vector<std::vector<std::unique_ptr<Node>>> bodies;  // if branches (+else), for body/else
  std::vector<std::pair<std::string, ExprPtr>> params;     // macro parameters
  bool has_else = false;
  int line = 0;
};

namespace {

using NodeList = std::vector<std::unique_ptr<Node>>;

struct Segment {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string content;
  int line;
};

// Splits the source into text, {{ }} and {% %} segments, applying
// whitespace control ({%- -%}) and transformers' trim_blocks/lstrip_blocks.
std::vector<Segment> Scan(const std::string& src) {
  std::vector<Segment> out;
  size_t pos = 0;
  int line = 1;
  bool strip_next = false;  // a "-" closing the previous tag
  bool trim_newline = false;  // trim_blocks after a block/comment tag
  auto count_lines = [](const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); };
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' &&
           src[open + 1] != '#') {
      open = src.find('{', open + 1);
    }
    if (open != std::string::npos && open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    const int text_line = line;
    line += count_lines(text);
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
      text.erase(0, k);
    } else if (trim_newline) {
      if (text.compare(0, 1, "\n") == 0) text.erase(0, 1);
      else if (text.compare(0, 2, "\r\n") == 0) text.erase(0, 2);
    }
    strip_next = trim_newline = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::kText, text, text_line});
      break;
    }
    const char kind = src[open + 1];
    size_t inner = open + 2;
    const bool strip_before = inner < src.size() && src[inner] == '-';
    const bool keep_before = inner < src.size() && src[inner] == '+';
    if (strip_before || keep_before) ++inner;
    if (strip_before) {
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    } else if ((kind == '%' || kind == '#') && !keep_before) {
      // lstrip_blocks: spaces/tabs between a line start and a block tag.
      size_t k = open;
      while (k > pos && (src[k - 1] == ' ' || src[k - 1] == '\t')) --k;
      const bool line_start = k == 0 || src[k - 1] == '\n';
      const size_t run = std::min(open - k, text.size());
      if (line_start) text.erase(text.size() - run);
    }
    if (!text.empty()) out.push_back({Segment::kText, text, text_line});
    // Find the closing delimiter, skipping string literals.
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t k = inner;
    char quote = 0;
    size_t close_at = std::string::npos;
    for (; k < src.size(); ++k) {
      const char c = src[k];
      if (kind != '#') {
        if (quote) {
          if (c == '\\') { ++k; continue; }
          if (c == quote) quote = 0;
          continue;
        }
        if (c == '\'' || c == '"') { quote = c; continue; }
      }
      if (src.compare(k, 2, close) == 0) { close_at = k; break; }
    }
    if (close_at == std::string::npos) {
      Throw("line " + std::to_string(line) + ": unclosed '{" + std::string(1, kind) + "' tag");
    }
    size_t inner_end = close_at;
    bool strip_after = false, keep_after = false;
    if (inner_end > inner && src[inner_end - 1] == '-') { strip_after = true; --inner_end; }
    else if (inner_end > inner && src[inner_end - 1] == '+') { keep_after = true; --inner_end; }
    const std::string body = src.substr(inner, inner_end - inner);
    if (kind == '{') out.push_back({Segment::kExpr, body, line});
    else if (kind == '%') out.push_back({Segment::kStmt, body, line});
    line += count_lines(body);
    pos = close_at + 2;
    strip_next = strip_after;
    trim_newline = !strip_after && !keep_after && kind != '{';
    if (pos >= src.size()) break;
  }
  return out;
}

class StmtParser {
 public:
  explicit StmtParser(std::vector<Segment> segs) : s_(std::move(segs)) {}

  NodeList ParseAll() {
    std::string end;
    NodeList body = ParseBody({}, &end);
    return body;
  }

 private:
  [[noreturn]] void Fail(int line, const std::string& m) { Throw("line " + std::to_string(line) + ": " + m); }

  // Parses until one of `ends` (first word of a {% %} tag); stores it in *end.
  NodeList ParseBody(const std::vector<std::string>& ends, std::string* end) {
    if (++depth_ > kMaxNesting) Fail(i_ < s_.size() ? s_[i_].line : 0, "blocks nested too deeply");
    struct Leave {
      int* d;
      ~Leave() { --*d; }
    } leave{&depth_};
    NodeList out;
    while (i_ < s_.size()) {
      const Segment& seg = s_[i_];
      if (seg.kind == Segment::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kText;
        n->text = seg.content;
        out.push_back(std::move(n));
        ++i_;
        continue;
      }
      if (seg.kind == Segment::kExpr) {
        ExprParser p(LexExpression(seg.content, seg.line));
        auto n = std::make_unique<Node>();
        n->kind = Node::kOutput;
        n->line = seg.line;
        n->exprs.push_back(p.ParseTupleOrExpr());
        if (!p.AtEnd()) p.Fail("unexpected '" + p.Peek().text + "' in {{ }}");
        out.push_back(std::move(n));
        ++i_;
        continue;
      }
      ExprParser p(LexExpression(seg.content, seg.line));
      if (p.Peek().kind != Tk::kName) p.Fail("expected a statement name");
      const std::string word = p.Peek().text;
      if (std::find(ends.begin(), ends.end(), word) != ends.end()) {
        *end = word;
        return out;
      }
      ++i_;
      p.Next();
      out.push_back(ParseStatement(word, p, seg.line));
    }
    if (!ends.empty()) {
      Fail(s_.empty() ? 0 : s_.back().line, "missing {% " + ends.back() + " %}");
    }
    return out;
  }

  void ExpectEndOfTag(ExprParser& p) {
    if (!p.AtEnd()) p.Fail("unexpected '" + p.Peek().text + "' at end of tag");
  }
  // Consumes the {% endX %} (or elif/else) tag found by ParseBody.
  ExprParser TakeTag() {
    const Segment& seg = s_[i_++];
    ExprParser p(LexExpression(seg.content, seg.line));
    p.Next();
    return p;
  }

  std::unique_ptr<Node> ParseStatement(const std::string& word, ExprParser& p, int line) {
    auto n = std::make_unique<Node>();
    n->line = line;
    std::string end;
    if (word == "if") {
      n->kind = Node::kIf;
      n->exprs.push_back(p.ParseTupleOrExpr());
      ExpectEndOfTag(p);
      for (;;) {
        n->bodies.push_back(ParseBody({"elif", "else", "endif"}, &end));
        ExprParser t = TakeTag();
        if (end == "elif") {
          n->exprs.push_back(t.ParseTupleOrExpr());
          ExpectEndOfTag(t);
          continue;
        }
        ExpectEndOfTag(t);
        if (end == "else") {
          n->has_else = true;
          n->bodies.push_back(ParseBody({"endif"}, &end));
          ExprParser e = TakeTag();
          ExpectEndOfTag(e);
        }
        break;
      }
      return n;
    }
    if (word == "for") {
      n->kind = Node::kFor;
      n->targets.push_back(p.ExpectName());
      while (p.IsOp(",")) { p.Next(); n->targets.push_back(p.ExpectName()); }
      if (!p.IsName("in")) p.Fail("expected 'in' in for loop");
      p.Next();
      // The iterable stops before a trailing "if" filter or "recursive".
      n->exprs.push_back(ParseIterable(p));
      if (p.IsName("if")) {
        p.Next();
        n->exprs.push_back(p.ParseExpr());
      }
      if (p.IsName("recursive")) p.Fail("recursive loops are not supported");
      ExpectEndOfTag(p);
      n->bodies.push_back(ParseBody({"else", "endfor"}, &end));
      ExprParser t = TakeTag();
      ExpectEndOfTag(t);
      if (end == "else") {
        n->has_else = true;
        n->bodies.push_back(ParseBody({"endfor"}, &end));
        ExprParser e = TakeTag();
        ExpectEndOfTag(e);
      }
      return n;
    }
    if (word == "set") {
      std::string target = p.ExpectName();
      if (p.IsOp(".")) {
        p.Next();
        n->kind = Node::kSet;
        n->text = target;
        n->attr = p.ExpectName();
        p.Expect("=");
        n->exprs.push_back(p.ParseTupleOrExpr());
        ExpectEndOfTag(p);
        return n;
      }
      n->targets.push_back(target);
      while (p.IsOp(",")) { p.Next(); n->targets.push_back(p.ExpectName()); }
      if (p.AtEnd() && n->targets.size() == 1) {
        n->kind = Node::kSetBlock;
        n->bodies.push_back(ParseBody({"endset"}, &end));
        ExprParser t = TakeTag();
        ExpectEndOfTag(t);
        return n;
      }
      n->kind = Node::kSet;
      p.Expect("=");
      n->exprs.push_back(p.ParseTupleOrExpr());
      ExpectEndOfTag(p);
      return n;
    }
    if (word == "macro") {
      n->kind = Node::kMacro;
      n->text = p.ExpectName();
      p.Expect("(");
      while (!p.IsOp(")")) {
        std::string name = p.ExpectName();
        ExprPtr def;
        if (p.IsOp("=")) { p.Next(); def = p.ParseExpr(); }
        n->params.emplace_back(std::move(name), std::move(def));
        if (!p.IsOp(",")) break;
        p.Next();
      }
      p.Expect(")");
      ExpectEndOfTag(p);
      n->bodies.push_back(ParseBody({"endmacro"}, &end));
      ExprParser t = TakeTag();
      ExpectEndOfTag(t);
      return n;
    }
    if (word == "break" || word == "continue") {
      n->kind = word == "break" ? Node::kBreak : Node::kContinue;
      ExpectEndOfTag(p);
      return n;
    }
    if (word == "generation") {  // transformers' assistant-mask extension: renders its body
      n->kind = Node::kBlock;
      ExpectEndOfTag(p);
      n->bodies.push_back(ParseBody({"endgeneration"}, &end));
      ExprParser t = TakeTag();
      ExpectEndOfTag(t);
      return n;
    }
    Fail(line, "unsupported statement '{% " + word + " %}'");
  }

  ExprPtr ParseIterable(ExprParser& p) {
    // Parse an expression but stop at a top-level "if" (loop filter).
    // ParseExpr would treat "x if c" as a conditional expression, so parse
    // at the 'or' level and only accept "if ... else" when an else follows.
    return p.ParseExprNoCond();
  }

  std::vector<Segment> s_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace
}  // namespace ropeserve::jinja

namespace ropeserve::jinja {
namespace {

struct LoopControl {
  enum Kind { kBreak, kContinue } kind;
};

class Renderer {
 public:
  explicit Renderer(const nlohmann::ordered_json& context) {
    scopes_.emplace_back();
    InstallGlobals();
    if (context.is_object()) {
      for (auto it = context.begin(); it != context.end(); ++it) scopes_[0][it.key()] = FromJson(it.value());
    }
  }

  void Render(const NodeList& body, std::string& out) {
    for (const auto& n : body) {
      // A budget on work and output: a template (or a conversation fed to
      // it) must not make a request loop or allocate without bound.
      if (++steps_ > kMaxSteps) Throw("template exceeded its work limit (" + std::to_string(kMaxSteps) + " steps)");
      Exec(*n, out);
      if (out.size() > kMaxOutputBytes) Throw("template output exceeds " + std::to_string(kMaxOutputBytes >> 20) + " MiB");
    }
  }

 private:
  using Scope = std::map<std::string, Value>;

  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    auto g = globals_.find(name);
    if (g != globals_.end()) return g->second;
    return Value();
  }

  void InstallGlobals() {
    globals_["raise_exception"] = Value::Fn([](Args& a) -> Value {
      throw JinjaError{a.pos.empty() ? std::string("raise_exception called") : ToStr(a.pos[0]), true};
    });
    globals_["range"] = Value::Fn([](Args& a) -> Value {
      int64_t start = 0, stop = 0, step = 1;
      auto num = [](const Value& v) {
        if (v.kind != Value::kInt) Throw("range: arguments must be integers");
        return v.i;
      };
      if (a.pos.size() == 1) stop = num(a.pos[0]);
      else if (a.pos.size() >= 2) { start = num(a.pos[0]); stop = num(a.pos[1]); }
      if (a.pos.size() == 3) step = num(a.pos[2]);
      if (a.pos.empty() || a.pos.size() > 3) Throw("range: expected 1 to 3 arguments");
      if (step == 0) Throw("range: step must not be zero");
      Array out;
      for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
        out.push_back(Value::Int(k));
        if (out.size() > 10'000'000) Throw("range: too many elements");
      }
      return Value::List(std::move(out));
    });
    auto make_dict = [](Args& a) -> Value {
      Value d = Value::Dict();
      for (auto& [k, v] : a.kw) d.Set(k, v);
      return d;
    };
    globals_["namespace"] = Value::Fn(make_dict);
    globals_["dict"] = Value::Fn(make_dict);
    globals_["strftime_now"] = Value::Fn([](Args& a) -> Value {
      if (a.pos.empty() || a.pos[0].kind != Value::kString) Throw("strftime_now: expected a format string");
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof buf, a.pos[0].s.c_str(), &tm);
      return Value::Str(std::string(buf, n));
    });
  }

  // ------------------------------------------------------------ statements

  void Exec(const Node& n, std::string& out) {
    switch (n.kind) {
      case Node::kText: out += n.text; return;
      case Node::kOutput: out += ToStr(Eval(*n.exprs[0])); return;
      case Node::kBlock: Render(n.bodies[0], out); return;
      case Node::kIf:
        for (size_t k = 0; k < n.exprs.size(); ++k) {
          if (Eval(*n.exprs[k]).Truthy()) { Render(n.bodies[k], out); return; }
        }
        if (n.has_else) Render(n.bodies.back(), out);
        return;
      case Node::kFor: ExecFor(n, out); return;
      case Node::kSet: {
        Value v = Eval(*n.exprs[0]);
        if (!n.attr.empty()) {
          Value ns = Lookup(n.text);
          if (ns.kind != Value::kObject) Throw("line " + std::to_string(n.line) + ": cannot set attribute of " + KindName(ns) + " '" + n.text + "'");
          ns.Set(n.attr, std::move(v));
          return;
        }
        Assign(n.targets, std::move(v), n.line);
        return;
      }
      case Node::kSetBlock: {
        std::string body;
        Render(n.bodies[0], body);
        scopes_.back()[n.targets[0]] = Value::Str(std::move(body));
        return;
      }
      case Node::kMacro: DefineMacro(n); return;
      case Node::kBreak: throw LoopControl{LoopControl::kBreak};
      case Node::kContinue: throw LoopControl{LoopControl::kContinue};
    }
  }

  void Assign(const std::vector<std::string>& targets, Value v, int line) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = std::move(v);
      return;
    }
    if (v.kind != Value::kArray || v.arr->size() != targets.size()) {
      Throw("line " + std::to_string(line) + ": cannot unpack " + KindName(v) + " into " + std::to_string(targets.size()) + " names");
    }
    for (size_t k = 0; k < targets.size(); ++k) scopes_.back()[targets[k]] = (*v.arr)[k];
  }

  Array Iterate(const Value& v, int line) {
    switch (v.kind) {
      case Value::kArray: return *v.arr;
      case Value::kObject: {
        Array keys;
        for (const auto& kv : *v.obj) keys.push_back(Value::Str(kv.first));
        return keys;
      }
      case Value::kString: {
        Array chars;
        for (char32_t c : U32(v.s)) chars.push_back(Value::Str(tok::ToUtf8(c)));
        return chars;
      }
      case Value::kUndefined: case Value::kNone: return {};
      default: Throw("line " + std::to_string(line) + ": " + KindName(v) + " is not iterable");
    }
  }

  void ExecFor(const Node& n, std::string& out) {
    Array items = Iterate(Eval(*n.exprs[0]), n.line);
    if (n.exprs.size() > 1) {
      Array kept;
      for (Value& item : items) {
        scopes_.emplace_back();
        Assign(n.targets, item, n.line);
        const bool keep = Eval(*n.exprs[1]).Truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (n.has_else) Render(n.bodies[1], out);
      return;
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      scopes_.emplace_back();
      Value loop = Value::Dict();
      loop.Set("index", Value::Int(k + 1));
      loop.Set("index0", Value::Int(k));
      loop.Set("revindex", Value::Int(len - k));
      loop.Set("revindex0", Value::Int(len - k - 1));
      loop.Set("first", Value::Bool(k == 0));
      loop.Set("last", Value::Bool(k == len - 1));
      loop.Set("length", Value::Int(len));
      loop.Set("previtem", k > 0 ? items[k - 1] : Value());
      loop.Set("nextitem", k + 1 < len ? items[k + 1] : Value());
      loop.Set("cycle", Value::Fn([k](Args& a) -> Value {
        if (a.pos.empty()) Throw("loop.cycle: needs at least one argument");
        return a.pos[static_cast<size_t>(k) % a.pos.size()];
      }));
      scopes_.back()["loop"] = loop;
      Assign(n.targets, items[k], n.line);
      bool stop = false;
      try {
        Render(n.bodies[0], out);
      } catch (const LoopControl& c) {
        stop = c.kind == LoopControl::kBreak;
      }
      scopes_.pop_back();
      if (stop) break;
    }
  }

  void DefineMacro(const Node& n) {
    const Node* node = &n;
    Renderer* self = this;
    scopes_.back()[n.text] = Value::Fn([self, node](Args& a) -> Value {
      if (self->call_depth_ >= kMaxCallDepth) Throw("macro '" + node->text + "' recursed too deeply");
      struct Depth {
        int* d;
        explicit Depth(int* x) : d(x) { ++*d; }
        ~Depth() { --*d; }
      } depth(&self->call_depth_);
      Scope args;
      size_t k = 0;
      for (; k < node->params.size(); ++k) {
        const auto& [name, def] = node->params[k];
        if (k < a.pos.size()) args[name] = a.pos[k];
        else args[name] = def ? self->Eval(*def) : Value();
      }
      if (a.pos.size() > node->params.size()) Throw("macro '" + node->text + "' takes " + std::to_string(node->params.size()) + " arguments");
      for (auto& [key, v] : a.kw) {
        bool found = false;
        for (const auto& p : node->params) found |= p.first == key;
        if (!found) Throw("macro '" + node->text + "' has no parameter '" + key + "'");
        args[key] = v;
      }
      // A macro sees the template's top-level variables and its arguments.
      std::vector<Scope> saved;
      saved.swap(self->scopes_);
      self->scopes_.push_back(saved.front());
      self->scopes_.push_back(std::move(args));
      std::string out;
      try {
        self->Render(node->bodies[0], out);
      } catch (...) {
        self->scopes_.swap(saved);
        throw;
      }
      self->scopes_.swap(saved);
      return Value::Str(std::move(out));
    });
  }

  // ----------------------------------------------------------- expressions

  Args EvalArgs(const Expr& e, size_t first) {
    Args a;
    const size_t nkw = e.kw.size();
    const size_t npos = e.kids.size() - first - nkw;
    for (size_t k = 0; k < npos; ++k) a.pos.push_back(Eval(*e.kids[first + k]));
    for (size_t k = 0; k < nkw; ++k) a.kw.emplace_back(e.kw[k], Eval(*e.kids[first + npos + k]));
    return a;
  }

  static const Value* Kw(const Args& a, const char* name) {
    for (const auto& [k, v] : a.kw) if (k == name) return &v;
    return nullptr;
  }
  static const Value* Arg(const Args& a, size_t pos, const char* name) {
    if (pos < a.pos.size()) return &a.pos[pos];
    return Kw(a, name);
  }

  Value Attr(const Value& obj, const std::string& name) {
    if (obj.kind == Value::kObject) {
      if (const Value* v = obj.Find(name)) return *v;
      return Value();
    }
    if (obj.kind == Value::kArray && !name.empty() && std::isdigit(static_cast<unsigned char>(name[0]))) {
      return Index(obj, Value::Int(std::stoll(name)));
    }
    return Value();
  }

  Value Index(const Value& obj, const Value& key) {
    if (obj.kind == Value::kArray || obj.kind == Value::kString) {
      if (key.kind != Value::kInt) {
        if (obj.kind == Value::kArray && key.kind == Value::kString) return Value();
        Throw(std::string(KindName(obj)) + " indices must be integers");
      }
      if (obj.kind == Value::kArray) {
        int64_t i = key.i < 0 ? key.i + static_cast<int64_t>(obj.arr->size()) : key.i;
        if (i < 0 || i >= static_cast<int64_t>(obj.arr->size())) return Value();
        return (*obj.arr)[static_cast<size_t>(i)];
      }
      const std::u32string u = U32(obj.s);
      int64_t i = key.i < 0 ? key.i + static_cast<int64_t>(u.size()) : key.i;
      if (i < 0 || i >= static_cast<int64_t>(u.size())) return Value();
      return Value::Str(tok::ToUtf8(u[static_cast<size_t>(i)]));
    }
    if (obj.kind == Value::kObject) {
      if (const Value* v = obj.Find(ToStr(key))) return *v;
      return Value();
    }
    return Value();
  }

  Value Eval(const Expr& e) {
    switch (e.kind) {
      case Expr::kLiteral: return e.literal;
      case Expr::kName: return Lookup(e.name);
      case Expr::kList: case Expr::kTuple: {
        Array a;
        for (const auto& k : e.kids) a.push_back(Eval(*k));
        return Value::List(std::move(a));
      }
      case Expr::kDict: {
        Value d = Value::Dict();
        for (size_t k = 0; k + 1 < e.kids.size(); k += 2) d.Set(ToStr(Eval(*e.kids[k])), Eval(*e.kids[k + 1]));
        return d;
      }
      case Expr::kAttr: return Attr(Eval(*e.kids[0]), e.name);
      case Expr::kIndex: return Index(Eval(*e.kids[0]), Eval(*e.kids[1]));
      case Expr::kSlice: {
        const Value obj = Eval(*e.kids[0]);
        std::optional<int64_t> parts[3];
        for (int k = 0; k < 3; ++k) {
          if (!e.kids[k + 1]) continue;
          const Value v = Eval(*e.kids[k + 1]);
          if (v.kind == Value::kNone) continue;
          if (v.kind != Value::kInt) Throw("line " + std::to_string(e.line) + ": slice indices must be integers");
          parts[k] = v.i;
        }
        if (obj.kind == Value::kArray) return Value::List(SliceSeq(*obj.arr, parts[0], parts[1], parts[2]));
        if (obj.kind == Value::kString) return Value::Str(U8(SliceSeq(U32(obj.s), parts[0], parts[1], parts[2])));
        if (obj.undefined()) return Value();
        Throw("line " + std::to_string(e.line) + ": cannot slice " + KindName(obj));
      }
      case Expr::kCall: return EvalCall(e);
      case Expr::kFilter: {
        Value v = Eval(*e.kids[0]);
        Args a = EvalArgs(e, 1);
        return ApplyFilter(e.name, std::move(v), a, e.line);
      }
      case Expr::kTest: {
        const Expr& subject = *e.kids[0];
        Args a = EvalArgs(e, 1);
        bool r;
        if (e.name == "defined" || e.name == "undefined") {
          r = !Eval(subject).undefined();
          if (e.name == "undefined") r = !r;
        } else {
          r = ApplyTest(e.name, Eval(subject), a, e.line);
        }
        return Value::Bool(e.negated ? !r : r);
      }
      case Expr::kNeg: case Expr::kPos: {
        const Value v = Eval(*e.kids[0]);
        if (!v.number()) Throw("line " + std::to_string(e.line) + ": bad operand for unary minus: " + KindName(v));
        if (e.kind == Expr::kPos) return v;
        return v.kind == Value::kFloat ? Value::Float(-v.f) : Value::Int(-(v.kind == Value::kBool ? v.b : v.i));
      }
      case Expr::kNot: return Value::Bool(!Eval(*e.kids[0]).Truthy());
      case Expr::kAnd: {
        Value a = Eval(*e.kids[0]);
        return a.Truthy() ? Eval(*e.kids[1]) : a;
      }
      case Expr::kOr: {
        Value a = Eval(*e.kids[0]);
        return a.Truthy() ? a : Eval(*e.kids[1]);
      }
      case Expr::kCond: return Eval(*e.kids[1]).Truthy() ? Eval(*e.kids[0]) : Eval(*e.kids[2]);
      case Expr::kCompare: return Value::Bool(EvalCompare(e.name, Eval(*e.kids[0]), Eval(*e.kids[1]), e.line));
      case Expr::kBinary: return EvalBinary(e.name, Eval(*e.kids[0]), Eval(*e.kids[1]), e.line);
    }
    Throw("internal: unknown expression");
  }

  bool Contains(const Value& container, const Value& item, int line) {
    switch (container.kind) {
      case Value::kString:
        if (item.kind != Value::kString) Throw("line " + std::to_string(line) + ": 'in <string>' needs a string on the left");
        return container.s.find(item.s) != std::string::npos;
      case Value::kArray:
        for (const Value& v : *container.arr) if (Equal(v, item)) return true;
        return false;
      case Value::kObject: return container.Find(ToStr(item)) != nullptr;
      case Value::kUndefined: case Value::kNone: return false;
      default: Throw("line " + std::to_string(line) + ": argument of type " + KindName(container) + " is not iterable");
    }
  }

  bool EvalCompare(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "==") return Equal(a, b);
    if (op == "!=") return !Equal(a, b);
    if (op == "in") return Contains(b, a, line);
    if (op == "not in") return !Contains(b, a, line);
    const int c = Compare(a, b);
    if (op == "<") return c < 0;
    if (op == ">") return c > 0;
    if (op == "<=") return c <= 0;
    return c >= 0;
  }

  Value EvalBinary(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "~") return Value::Str(ToStr(a) + ToStr(b));
    if (op == "+") {
      if (a.kind == Value::kString && b.kind == Value::kString) return Value::Str(a.s + b.s);
      if (a.kind == Value::kArray && b.kind == Value::kArray) {
        Array r = *a.arr;
        r.insert(r.end(), b.arr->begin(), b.arr->end());
        return Value::List(std::move(r));
      }
      if ((a.kind == Value::kString || a.undefined()) && (b.kind == Value::kString || b.undefined())) {
        return Value::Str(ToStr(a) + ToStr(b));
      }
    }
    if (op == "*" && a.kind == Value::kString && b.kind == Value::kInt) {
      std::string r;
      for (int64_t k = 0; k < b.i; ++k) r += a.s;
      return Value::Str(std::move(r));
    }
    if (!a.number() || !b.number()) {
      Throw("line " + std::to_string(line) + ": unsupported operand types for " + op + ": " + KindName(a) + " and " + KindName(b));
    }
    const bool ints = a.kind != Value::kFloat && b.kind != Value::kFloat;
    const int64_t x = a.kind == Value::kBool ? a.b : a.i, y = b.kind == Value::kBool ? b.b : b.i;
    const double fx = a.AsDouble(), fy = b.AsDouble();
    if (op == "+") return ints ? Value::Int(x + y) : Value::Float(fx + fy);
    if (op == "-") return ints ? Value::Int(x - y) : Value::Float(fx - fy);
    if (op == "*") return ints ? Value::Int(x * y) : Value::Float(fx * fy);
    if (op == "/") {
      if (fy == 0) Throw("line " + std::to_string(line) + ": division by zero");
      return Value::Float(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (fy == 0) Throw("line " + std::to_string(line) + ": division by zero");
      if (ints) {
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) { --q; r += y; }
        return Value::Int(op == "//" ? q : r);
      }
      const double q = std::floor(fx / fy);
      return Value::Float(op == "//" ? q : fx - q * fy);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        int64_t r = 1;
        for (int64_t k = 0; k < y; ++k) r *= x;
        return Value::Int(r);
      }
      return Value::Float(std::pow(fx, fy));
    }
    Throw("line " + std::to_string(line) + ": unknown operator " + op);
  }

  Value EvalCall(const Expr& e) {
    const Expr& callee = *e.kids[0];
    Args a = EvalArgs(e, 1);
    if (callee.kind == Expr::kAttr) {
      Value obj = Eval(*callee.kids[0]);
      if (obj.kind == Value::kString || obj.kind == Value::kArray ||
          (obj.kind == Value::kObject && !obj.Find(callee.name))) {
        return CallMethod(obj, callee.name, a, e.line);
      }
    }
    Value f = Eval(callee);
    if (f.kind != Value::kFunction) {
      std::string what = callee.kind == Expr::kName ? "'" + callee.name + "'" : std::string("expression");
      if (callee.kind == Expr::kAttr) what = "'" + callee.name + "'";
      Throw("line " + std::to_string(e.line) + ": " + what + " is " + (f.undefined() ? "undefined" : std::string("not callable")));
    }
    return (*f.fn)(a);
  }

  Value CallMethod(Value& obj, const std::string& name, Args& a, int line) {
    auto need_str = [&](size_t k, const char* what) -> const std::string& {
      const Value* v = k < a.pos.size() ? &a.pos[k] : nullptr;
      if (!v || v->kind != Value::kString) Throw("line " + std::to_string(line) + ": " + what + " expects a string argument");
      return v->s;
    };
    if (obj.kind == Value::kString) {
      const std::string& s = obj.s;
      if (name == "strip") return Value::Str(StripChars(s, Arg(a, 0, "chars"), true, true));
      if (name == "lstrip") return Value::Str(StripChars(s, Arg(a, 0, "chars"), true, false));
      if (name == "rstrip") return Value::Str(StripChars(s, Arg(a, 0, "chars"), false, true));
      if (name == "upper") return Value::Str(MapCase(s, 1));
      if (name == "lower") return Value::Str(MapCase(s, 0));
      if (name == "title") return Value::Str(MapCase(s, 2));
      if (name == "capitalize") return Value::Str(MapCase(MapCase(s, 0), 3));
      if (name == "split") {
        const Value* mx = Arg(a, 1, "maxsplit");
        return SplitString(s, Arg(a, 0, "sep"), mx && mx->kind == Value::kInt ? mx->i : -1);
      }
      if (name == "startswith" || name == "endswith") {
        const Value* p = Arg(a, 0, "prefix");
        if (!p) Throw("line " + std::to_string(line) + ": " + name + " needs an argument");
        std::vector<std::string> cands;
        if (p->kind == Value::kString) cands.push_back(p->s);
        else if (p->kind == Value::kArray) for (const Value& v : *p->arr) cands.push_back(ToStr(v));
        for (const auto& c : cands) {
          if (name == "startswith" ? s.compare(0, c.size(), c) == 0
                                   : (s.size() >= c.size() && s.compare(s.size() - c.size(), c.size(), c) == 0)) {
            return Value::Bool(true);
          }
        }
        return Value::Bool(false);
      }
      if (name == "replace") {
        const Value* cnt = Arg(a, 2, "count");
        return Value::Str(ReplaceAll(s, need_str(0, "replace"), need_str(1, "replace"), cnt && cnt->kind == Value::kInt ? cnt->i : -1));
      }
      if (name == "find") {
        const size_t at = s.find(need_str(0, "find"));
        return Value::Int(at == std::string::npos ? -1 : static_cast<int64_t>(tok::CountCodePoints(s.substr(0, at))));
      }
      if (name == "count") {
        const std::string& sub = need_str(0, "count");
        int64_t n = 0;
        if (sub.empty()) return Value::Int(static_cast<int64_t>(tok::CountCodePoints(s)) + 1);
        for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
        return Value::Int(n);
      }
      if (name == "join") {
        const Value* it = Arg(a, 0, "iterable");
        if (!it) Throw("line " + std::to_string(line) + ": join needs an argument");
        std::string r;
        Array items = Iterate(*it, line);
        for (size_t k = 0; k < items.size(); ++k) r += (k ? s : "") + ToStr(items[k]);
        return Value::Str(std::move(r));
      }
      if (name == "splitlines") {
        Array out;
        size_t pos = 0;
        while (pos < s.size()) {
          size_t nl = s.find_first_of("\r\n", pos);
          if (nl == std::string::npos) { out.push_back(Value::Str(s.substr(pos))); break; }
          out.push_back(Value::Str(s.substr(pos, nl - pos)));
          pos = nl + ((s[nl] == '\r' && nl + 1 < s.size() && s[nl + 1] == '\n') ? 2 : 1);
        }
        return Value::List(std::move(out));
      }
      if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isupper" || name == "islower") {
        const std::u32string u = U32(s);
        if (u.empty()) return Value::Bool(false);
        bool all = true, cased = false;
        for (char32_t c : u) {
          if (name == "isdigit") all &= tok::IsNumeric(c);
          else if (name == "isalpha") all &= tok::IsAlphabetic(c);
          else if (name == "isspace") all &= tok::IsWhitespace(c);
          else {
            const bool lower = tok::ToUppercase(c) != std::u32string(1, c);
            const bool upper = tok::ToLowercase(c) != std::u32string(1, c);
            cased |= lower || upper;
            if (name == "isupper") all &= !lower;
            else all &= !upper;
          }
        }
        return Value::Bool(all && (name.rfind("is", 0) == 0 && (name == "isupper" || name == "islower") ? cased : true));
      }
      if (name == "format") {
        std::string r;
        size_t arg = 0;
        for (size_t k = 0; k < s.size(); ++k) {
          if (s[k] == '{' && k + 1 < s.size() && s[k + 1] == '}') {
            if (arg >= a.pos.size()) Throw("line " + std::to_string(line) + ": format: not enough arguments");
            r += ToStr(a.pos[arg++]);
            ++k;
          } else {
            r += s[k];
          }
        }
        return Value::Str(std::move(r));
      }
    } else if (obj.kind == Value::kArray) {
      if (name == "append") {
        if (a.pos.size() != 1) Throw("line " + std::to_string(line) + ": append takes one argument");
        obj.arr->push_back(a.pos[0]);
        return Value::None();
      }
      if (name == "extend") {
        if (a.pos.size() != 1) Throw("line " + std::to_string(line) + ": extend takes one argument");
        Array more = Iterate(a.pos[0], line);
        obj.arr->insert(obj.arr->end(), more.begin(), more.end());
        return Value::None();
      }
      if (name == "pop") {
        if (obj.arr->empty()) Throw("line " + std::to_string(line) + ": pop from empty list");
        int64_t i = a.pos.empty() ? -1 : a.pos[0].i;
        if (i < 0) i += static_cast<int64_t>(obj.arr->size());
        if (i < 0 || i >= static_cast<int64_t>(obj.arr->size())) Throw("line " + std::to_string(line) + ": pop index out of range");
        Value v = (*obj.arr)[static_cast<size_t>(i)];
        obj.arr->erase(obj.arr->begin() + i);
        return v;
      }
      if (name == "index" || name == "count") {
        if (a.pos.empty()) Throw("line " + std::to_string(line) + ": " + name + " needs an argument");
        int64_t n = 0;
        for (size_t k = 0; k < obj.arr->size(); ++k) {
          if (Equal((*obj.arr)[k], a.pos[0])) {
            if (name == "index") return Value::Int(static_cast<int64_t>(k));
            ++n;
          }
        }
        if (name == "index") Throw("line " + std::to_string(line) + ": value is not in list");
        return Value::Int(n);
      }
    } else if (obj.kind == Value::kObject) {
      if (name == "items") {
        Array out;
        for (const auto& [k, v] : *obj.obj) out.push_back(Value::List({Value::Str(k), v}));
        return Value::List(std::move(out));
      }
      if (name == "keys" || name == "values") {
        Array out;
        for (const auto& [k, v] : *obj.obj) out.push_back(name == "keys" ? Value::Str(k) : v);
        return Value::List(std::move(out));
      }
      if (name == "get") {
        if (a.pos.empty()) Throw("line " + std::to_string(line) + ": get needs a key");
        if (const Value* v = obj.Find(ToStr(a.pos[0]))) return *v;
        return a.pos.size() > 1 ? a.pos[1] : Value::None();
      }
      if (name == "update") {
        for (const Value& src : a.pos) {
          if (src.kind == Value::kObject) for (const auto& [k, v] : *src.obj) obj.Set(k, v);
        }
        for (const auto& [k, v] : a.kw) obj.Set(k, v);
        return Value::None();
      }
    }
    Throw("line " + std::to_string(line) + ": " + KindName(obj) + " has no method '" + name + "'");
  }

  bool ApplyTest(const std::string& name, const Value& v, const Args& a, int line) {
    auto arg = [&](size_t k) -> const Value& {
      if (k >= a.pos.size()) Throw("line " + std::to_string(line) + ": test '" + name + "' needs an argument");
      return a.pos[k];
    };
    if (name == "none") return v.kind == Value::kNone;
    if (name == "string") return v.kind == Value::kString;
    if (name == "number") return v.kind == Value::kInt || v.kind == Value::kFloat;
    if (name == "integer") return v.kind == Value::kInt;
    if (name == "float") return v.kind == Value::kFloat;
    if (name == "boolean") return v.kind == Value::kBool;
    if (name == "true") return v.kind == Value::kBool && v.b;
    if (name == "false") return v.kind == Value::kBool && !v.b;
    if (name == "mapping") return v.kind == Value::kObject;
    if (name == "iterable") return v.kind == Value::kArray || v.kind == Value::kObject || v.kind == Value::kString;
    if (name == "sequence") return v.kind == Value::kArray || v.kind == Value::kString || v.kind == Value::kObject;
    if (name == "callable") return v.kind == Value::kFunction;
    if (name == "odd" || name == "even") {
      if (v.kind != Value::kInt) Throw("line " + std::to_string(line) + ": test '" + name + "' needs an integer");
      return (v.i % 2 != 0) == (name == "odd");
    }
    if (name == "divisibleby") {
      const Value& d = arg(0);
      if (v.kind != Value::kInt || d.kind != Value::kInt || d.i == 0) Throw("line " + std::to_string(line) + ": divisibleby needs non-zero integers");
      return v.i % d.i == 0;
    }
    if (name == "eq" || name == "equalto" || name == "==" || name == "sameas") return Equal(v, arg(0));
    if (name == "ne" || name == "!=") return !Equal(v, arg(0));
    if (name == "lt" || name == "lessthan" || name == "<") return Compare(v, arg(0)) < 0;
    if (name == "le" || name == "<=") return Compare(v, arg(0)) <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return Compare(v, arg(0)) > 0;
    if (name == "ge" || name == ">=") return Compare(v, arg(0)) >= 0;
    if (name == "in") return Contains(arg(0), v, line);
    if (name == "lower") return v.kind == Value::kString && MapCase(v.s, 0) == v.s;
    if (name == "upper") return v.kind == Value::kString && MapCase(v.s, 1) == v.s;
    if (name == "defined") return !v.undefined();
    if (name == "undefined") return v.undefined();
    Throw("line " + std::to_string(line) + ": unknown test '" + name + "'");
  }

  Value ApplyFilter(const std::string& name, Value v, Args& a, int line) {
    auto fail = [&](const std::string& m) { Throw("line " + std::to_string(line) + ": filter '" + name + "': " + m); };
    if (name == "trim") {
      if (v.kind != Value::kString) v = Value::Str(ToStr(v));
      return Value::Str(StripChars(v.s, Arg(a, 0, "chars"), true, true));
    }
    if (name == "length" || name == "count") {
      switch (v.kind) {
        case Value::kString: return Value::Int(static_cast<int64_t>(tok::CountCodePoints(v.s)));
        case Value::kArray: return Value::Int(static_cast<int64_t>(v.arr->size()));
        case Value::kObject: return Value::Int(static_cast<int64_t>(v.obj->size()));
        case Value::kUndefined: return Value::Int(0);
        default: fail(std::string("object of type ") + KindName(v) + " has no length");
      }
    }
    if (name == "tojson") {
      const Value* ind = Arg(a, 0, "indent");
      int indent = -1;
      if (ind && ind->kind == Value::kInt) indent = static_cast<int>(ind->i);
      std::string out;
      ToJson(out, v, indent, 0);
      return Value::Str(std::move(out));
    }
    if (name == "default" || name == "d") {
      const Value* def = Arg(a, 0, "default_value");
      const Value* boolean = Arg(a, 1, "boolean");
      const bool use = v.undefined() || (boolean && boolean->Truthy() && !v.Truthy());
      return use ? (def ? *def : Value::Str("")) : v;
    }
    if (name == "join") {
      const Value* sep = Arg(a, 0, "d");
      const Value* attr = Kw(a, "attribute");
      std::string r;
      Array items = Iterate(v, line);
      for (size_t k = 0; k < items.size(); ++k) {
        if (k && sep) r += ToStr(*sep);
        r += ToStr(attr ? Attr(items[k], ToStr(*attr)) : items[k]);
      }
      return Value::Str(std::move(r));
    }
    if (name == "first" || name == "last") {
      Array items = Iterate(v, line);
      if (items.empty()) return Value();
      return name == "first" ? items.front() : items.back();
    }
    if (name == "list") return Value::List(Iterate(v, line));
    if (name == "items") {
      if (v.kind != Value::kObject) fail("needs a mapping");
      Args none;
      return CallMethod(v, "items", none, line);
    }
    if (name == "dictsort") {
      if (v.kind != Value::kObject) fail("needs a mapping");
      Object sorted = *v.obj;
      std::stable_sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      Array out;
      for (auto& [k, val] : sorted) out.push_back(Value::List({Value::Str(k), val}));
      return Value::List(std::move(out));
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      const std::string s = ToStr(v);
      if (name == "upper") return Value::Str(MapCase(s, 1));
      if (name == "lower") return Value::Str(MapCase(s, 0));
      if (name == "title") return Value::Str(MapCase(s, 2));
      return Value::Str(MapCase(MapCase(s, 0), 3));
    }
    if (name == "replace") {
      if (a.pos.size() < 2) fail("needs two arguments");
      const Value* cnt = Arg(a, 2, "count");
      return Value::Str(ReplaceAll(ToStr(v), ToStr(a.pos[0]), ToStr(a.pos[1]), cnt && cnt->kind == Value::kInt ? cnt->i : -1));
    }
    if (name == "string") return Value::Str(ToStr(v));
    if (name == "safe" || name == "escape" || name == "e" || name == "forceescape") {
      // Templates render to plain text (autoescape is off in transformers).
      return name == "safe" ? v : Value::Str(ToStr(v));
    }
    if (name == "int") {
      if (v.kind == Value::kInt) return v;
      if (v.kind == Value::kFloat) return Value::Int(static_cast<int64_t>(v.f));
      if (v.kind == Value::kBool) return Value::Int(v.b);
      if (v.kind == Value::kString) {
        char* end = nullptr;
        const long long x = std::strtoll(v.s.c_str(), &end, 10);
        if (end != v.s.c_str() && *end == 0) return Value::Int(x);
      }
      const Value* def = Arg(a, 0, "default");
      return def ? *def : Value::Int(0);
    }
    if (name == "float") {
      if (v.number()) return Value::Float(v.AsDouble());
      if (v.kind == Value::kString) {
        char* end = nullptr;
        const double x = std::strtod(v.s.c_str(), &end);
        if (end != v.s.c_str() && *end == 0) return Value::Float(x);
      }
      return Value::Float(0);
    }
    if (name == "abs") {
      if (v.kind == Value::kInt) return Value::Int(v.i < 0 ? -v.i : v.i);
      if (v.kind == Value::kFloat) return Value::Float(std::fabs(v.f));
      fail("needs a number");
    }
    if (name == "round") {
      const Value* prec = Arg(a, 0, "precision");
      const double p = std::pow(10.0, prec && prec->kind == Value::kInt ? static_cast<double>(prec->i) : 0.0);
      return Value::Float(std::round(v.AsDouble() * p) / p);
    }
    if (name == "reverse") {
      if (v.kind == Value::kString) {
        std::u32string u = U32(v.s);
        std::reverse(u.begin(), u.end());
        return Value::Str(U8(u));
      }
      Array items = Iterate(v, line);
      std::reverse(items.begin(), items.end());
      return Value::List(std::move(items));
    }
    if (name == "unique") {
      Array out;
      for (Value& x : Iterate(v, line)) {
        bool seen = false;
        for (const Value& y : out) seen |= Equal(x, y);
        if (!seen) out.push_back(x);
      }
      return Value::List(std::move(out));
    }
    if (name == "sort") {
      Array items = Iterate(v, line);
      const Value* rev = Arg(a, 0, "reverse");
      const Value* attr = Kw(a, "attribute");
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        const Value kx = attr ? Attr(x, ToStr(*attr)) : x, ky = attr ? Attr(y, ToStr(*attr)) : y;
        return Compare(kx, ky) < 0;
      });
      if (rev && rev->Truthy()) std::reverse(items.begin(), items.end());
      return Value::List(std::move(items));
    }
    if (name == "sum") {
      Value total = Value::Int(0);
      for (Value& x : Iterate(v, line)) total = EvalBinary("+", total, x, line);
      return total;
    }
    if (name == "min" || name == "max") {
      Array items = Iterate(v, line);
      if (items.empty()) return Value();
      Value best = items[0];
      for (const Value& x : items) {
        const int c = Compare(x, best);
        if ((name == "min" && c < 0) || (name == "max" && c > 0)) best = x;
      }
      return best;
    }
    if (name == "indent") {
      const Value* w = Arg(a, 0, "width");
      const Value* first = Arg(a, 1, "first");
      const Value* blank = Arg(a, 2, "blank");
      const std::string pad = w && w->kind == Value::kString ? w->s : std::string(w && w->kind == Value::kInt ? static_cast<size_t>(w->i) : 4, ' ');
      const std::string s = ToStr(v);
      std::string out;
      size_t pos = 0;
      bool first_line = true;
      while (pos <= s.size()) {
        size_t nl = s.find('\n', pos);
        const std::string ln = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        const bool indent_it = first_line ? (first && first->Truthy()) : (!ln.empty() || (blank && blank->Truthy()));
        if (indent_it) out += pad;
        out += ln;
        if (nl == std::string::npos) break;
        out += '\n';
        pos = nl + 1;
        first_line = false;
      }
      return Value::Str(std::move(out));
    }
    if (name == "wordcount") {
      Value parts = SplitString(ToStr(v), nullptr, -1);
      return Value::Int(static_cast<int64_t>(parts.arr->size()));
    }
    if (name == "map") {
      Array items = Iterate(v, line);
      Array out;
      if (const Value* attr = Kw(a, "attribute")) {
        const Value* def = Kw(a, "default");
        for (const Value& x : items) {
          Value r = Attr(x, ToStr(*attr));
          out.push_back(r.undefined() && def ? *def : r);
        }
        return Value::List(std::move(out));
      }
      if (a.pos.empty() || a.pos[0].kind != Value::kString) fail("needs a filter name or attribute=");
      const std::string filter = a.pos[0].s;
      Args rest;
      rest.pos.assign(a.pos.begin() + 1, a.pos.end());
      rest.kw = a.kw;
      for (Value& x : items) out.push_back(ApplyFilter(filter, x, rest, line));
      return Value::List(std::move(out));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      const bool by_attr = name == "selectattr" || name == "rejectattr";
      const bool keep_match = name == "select" || name == "selectattr";
      Array items = Iterate(v, line);
      size_t k = 0;
      std::string attr;
      if (by_attr) {
        if (a.pos.empty()) fail("needs an attribute name");
        attr = ToStr(a.pos[k++]);
      }
      std::string test;
      Args targs;
      if (k < a.pos.size()) {
        test = ToStr(a.pos[k++]);
        targs.pos.assign(a.pos.begin() + static_cast<long>(k), a.pos.end());
      }
      Array out;
      for (Value& x : items) {
        const Value subject = by_attr ? Attr(x, attr) : x;
        bool r = test.empty() ? subject.Truthy() : ApplyTest(test, subject, targs, line);
        if (r == keep_match) out.push_back(x);
      }
      return Value::List(std::move(out));
    }
    if (name == "batch") {
      const Value* n = Arg(a, 0, "linecount");
      if (!n || n->kind != Value::kInt || n->i <= 0) fail("needs a positive size");
      Array out, cur;
      for (Value& x : Iterate(v, line)) {
        cur.push_back(x);
        if (static_cast<int64_t>(cur.size()) == n->i) { out.push_back(Value::List(std::move(cur))); cur.clear(); }
      }
      if (!cur.empty()) out.push_back(Value::List(std::move(cur)));
      return Value::List(std::move(out));
    }
    Throw("line " + std::to_string(line) + ": unknown filter '" + name + "'");
  }

  static constexpr std::uint64_t kMaxSteps = 2'000'000;  // a 1000-message chat needs ~50k
  static constexpr std::size_t kMaxOutputBytes = std::size_t{64} << 20;
  static constexpr int kMaxCallDepth = 64;
  std::vector<Scope> scopes_;
  Scope globals_;
  std::uint64_t steps_ = 0;
  int call_depth_ = 0;
};

// Names of filters and tests the renderer implements, checked at parse
// time so that a template using anything else fails when it is loaded.
const std::vector<std::string>& KnownFilters() {
  static const std::vector<std::string> k = {
      "trim", "length", "count", "tojson", "default", "d", "join", "first", "last", "list", "items", "dictsort",
      "upper", "lower", "title", "capitalize", "replace", "string", "safe", "escape", "e", "forceescape", "int",
      "float", "abs", "round", "reverse", "unique", "sort", "sum", "min", "max", "indent", "wordcount", "map",
      "select", "reject", "selectattr", "rejectattr", "batch"};
  return k;
}
const std::vector<std::string>& KnownTests() {
  static const std::vector<std::string> k = {
      "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "true", "false",
      "mapping", "iterable", "sequence", "callable", "odd", "even", "divisibleby", "eq", "equalto", "==",
      "sameas", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in",
      "lower", "upper"};
  return k;
}

void CheckExpr(const Expr* e) {
  if (!e) return;
  auto known = [](const std::vector<std::string>& v, const std::string& n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  if (e->kind == Expr::kFilter && !known(KnownFilters(), e->name)) {
    Throw("line " + std::to_string(e->line) + ": unsupported filter '" + e->name + "'");
  }
  if (e->kind == Expr::kTest && !known(KnownTests(), e->name)) {
    Throw("line " + std::to_string(e->line) + ": unsupported test '" + e->name + "'");
  }
  for (const auto& k : e->kids) CheckExpr(k.get());
}

void CheckNodes(const NodeList& nodes) {
  for (const auto& n : nodes) {
    for (const auto& e : n->exprs) CheckExpr(e.get());
    for (const auto& p : n->params) CheckExpr(p.second.get());
    for (const auto& b : n->bodies) CheckNodes(b);
  }
}

}  // namespace

Template::~Template() = default;

StatusOr<std::shared_ptr<const Template>> Template::Parse(const std::string& source) {
  if (tok::FindInvalidUtf8(source) != std::string::npos) return InvalidArgument("template is not valid UTF-8");
  try {
    auto t = std::shared_ptr<Template>(new Template());
    StmtParser p(Scan(source));
    t->body_ = p.ParseAll();
    CheckNodes(t->body_);
    return std::shared_ptr<const Template>(std::move(t));
  } catch (const JinjaError& e) {
    return InvalidArgument("chat template: " + e.message);
  }
}

StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context) const {
  try {
    Renderer r(context);
    std::string out;
    r.Render(body_, out);
    return out;
  } catch (const JinjaError& e) {
    if (e.raised_by_template) return FailedPrecondition(e.message);
    return InvalidArgument("chat template: " + e.message);
  } catch (const LoopControl&) {
    return InvalidArgument("chat template: break/continue outside a loop");
  }
}

}  // namespace ropeserve::jinja
