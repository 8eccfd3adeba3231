// The filters, tests and methods the renderer implements: Jinja2's
// built-ins and the Python string/list/dict methods chat templates call.
#include <algorithm>
#include <cmath>
#include <ctime>

#include "server/template/jinja_renderer.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::jinja::detail {

// Python str methods (None: not one of them).
std::optional<Value> Renderer::CallStringMethod(const std::string& s, const std::string& name, Args& a, int line) {
  auto need_str = [&](size_t k, const char* what) -> const std::string& {
    const Value* v = k < a.pos.size() ? &a.pos[k] : nullptr;
    if (!v || v->kind != Value::kString)
      Throw("line " + std::to_string(line) + ": " + what + " expects a string argument");
    return v->s;
  };
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
    if (p->kind == Value::kString)
      cands.push_back(p->s);
    else if (p->kind == Value::kArray)
      for (const Value& v : *p->arr) cands.push_back(ToStr(v));
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
    return Value::Str(
        ReplaceAll(s, need_str(0, "replace"), need_str(1, "replace"), cnt && cnt->kind == Value::kInt ? cnt->i : -1));
  }
  if (name == "find") {
    const size_t at = s.find(need_str(0, "find"));
    return Value::Int(at == std::string::npos ? -1 : static_cast<std::int64_t>(tok::CountCodePoints(s.substr(0, at))));
  }
  if (name == "count") {
    const std::string& sub = need_str(0, "count");
    std::int64_t n = 0;
    if (sub.empty()) return Value::Int(static_cast<std::int64_t>(tok::CountCodePoints(s)) + 1);
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
      if (nl == std::string::npos) {
        out.push_back(Value::Str(s.substr(pos)));
        break;
      }
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
      if (name == "isdigit")
        all &= tok::IsNumeric(c);
      else if (name == "isalpha")
        all &= tok::IsAlphabetic(c);
      else if (name == "isspace")
        all &= tok::IsWhitespace(c);
      else {
        const bool lower = tok::ToUppercase(c) != std::u32string(1, c);
        const bool upper = tok::ToLowercase(c) != std::u32string(1, c);
        cased |= lower || upper;
        if (name == "isupper")
          all &= !lower;
        else
          all &= !upper;
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
  return std::nullopt;
}

// Python list methods (None: not one of them).
std::optional<Value> Renderer::CallListMethod(Value& obj, const std::string& name, Args& a, int line) {
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
    std::int64_t i = a.pos.empty() ? -1 : a.pos[0].i;
    if (i < 0) i += static_cast<std::int64_t>(obj.arr->size());
    if (i < 0 || i >= static_cast<std::int64_t>(obj.arr->size()))
      Throw("line " + std::to_string(line) + ": pop index out of range");
    Value v = (*obj.arr)[static_cast<size_t>(i)];
    obj.arr->erase(obj.arr->begin() + i);
    return v;
  }
  if (name == "index" || name == "count") {
    if (a.pos.empty()) Throw("line " + std::to_string(line) + ": " + name + " needs an argument");
    std::int64_t n = 0;
    for (size_t k = 0; k < obj.arr->size(); ++k) {
      if (Equal((*obj.arr)[k], a.pos[0])) {
        if (name == "index") return Value::Int(static_cast<std::int64_t>(k));
        ++n;
      }
    }
    if (name == "index") Throw("line " + std::to_string(line) + ": value is not in list");
    return Value::Int(n);
  }
  return std::nullopt;
}

// Python dict methods (None: not one of them).
std::optional<Value> Renderer::CallDictMethod(Value& obj, const std::string& name, Args& a, int line) {
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
      if (src.kind == Value::kObject)
        for (const auto& [k, v] : *src.obj) obj.Set(k, v);
    }
    for (const auto& [k, v] : a.kw) obj.Set(k, v);
    return Value::None();
  }
  return std::nullopt;
}

Value Renderer::CallMethod(Value& obj, const std::string& name, Args& a, int line) {
  std::optional<Value> r;
  if (obj.kind == Value::kString)
    r = CallStringMethod(obj.s, name, a, line);
  else if (obj.kind == Value::kArray)
    r = CallListMethod(obj, name, a, line);
  else if (obj.kind == Value::kObject)
    r = CallDictMethod(obj, name, a, line);
  if (r) return std::move(*r);
  Throw("line " + std::to_string(line) + ": " + KindName(obj) + " has no method '" + name + "'");
}
bool Renderer::ApplyTest(const std::string& name, const Value& v, const Args& a, int line) {
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
    if (v.kind != Value::kInt || d.kind != Value::kInt || d.i == 0)
      Throw("line " + std::to_string(line) + ": divisibleby needs non-zero integers");
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

// The filters over sequences (and indent, wordcount); None: not one of them.
std::optional<Value> Renderer::ApplyCollectionFilter(const std::string& name, Value& v, Args& a, int line) {
  auto fail = [&](const std::string& m) { Throw("line " + std::to_string(line) + ": filter '" + name + "': " + m); };
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
    const std::string pad = w && w->kind == Value::kString
                                ? w->s
                                : std::string(w && w->kind == Value::kInt ? static_cast<size_t>(w->i) : 4, ' ');
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
    return Value::Int(static_cast<std::int64_t>(parts.arr->size()));
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
      if (static_cast<std::int64_t>(cur.size()) == n->i) {
        out.push_back(Value::List(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) out.push_back(Value::List(std::move(cur)));
    return Value::List(std::move(out));
  }
  return std::nullopt;
}

Value Renderer::ApplyFilter(const std::string& name, Value v, Args& a, int line) {
  auto fail = [&](const std::string& m) { Throw("line " + std::to_string(line) + ": filter '" + name + "': " + m); };
  if (name == "trim") {
    if (v.kind != Value::kString) v = Value::Str(ToStr(v));
    return Value::Str(StripChars(v.s, Arg(a, 0, "chars"), true, true));
  }
  if (name == "length" || name == "count") {
    switch (v.kind) {
      case Value::kString:
        return Value::Int(static_cast<std::int64_t>(tok::CountCodePoints(v.s)));
      case Value::kArray:
        return Value::Int(static_cast<std::int64_t>(v.arr->size()));
      case Value::kObject:
        return Value::Int(static_cast<std::int64_t>(v.obj->size()));
      case Value::kUndefined:
        return Value::Int(0);
      default:
        fail(std::string("object of type ") + KindName(v) + " has no length");
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
    return Value::Str(
        ReplaceAll(ToStr(v), ToStr(a.pos[0]), ToStr(a.pos[1]), cnt && cnt->kind == Value::kInt ? cnt->i : -1));
  }
  if (name == "string") return Value::Str(ToStr(v));
  if (name == "safe" || name == "escape" || name == "e" || name == "forceescape") {
    // Templates render to plain text (autoescape is off in transformers).
    return name == "safe" ? v : Value::Str(ToStr(v));
  }
  if (name == "int") {
    if (v.kind == Value::kInt) return v;
    if (v.kind == Value::kFloat) return Value::Int(static_cast<std::int64_t>(v.f));
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
  if (std::optional<Value> r = ApplyCollectionFilter(name, v, a, line)) return std::move(*r);
  Throw("line " + std::to_string(line) + ": unknown filter '" + name + "'");
}

// Names of filters and tests the renderer implements, checked at parse
// time so that a template using anything else fails when it is loaded.
const std::vector<std::string>& KnownFilters() {
  static const std::vector<std::string> k = {
      "trim",    "length",    "count",   "tojson",   "default", "d",           "join",       "first",
      "last",    "list",      "items",   "dictsort", "upper",   "lower",       "title",      "capitalize",
      "replace", "string",    "safe",    "escape",   "e",       "forceescape", "int",        "float",
      "abs",     "round",     "reverse", "unique",   "sort",    "sum",         "min",        "max",
      "indent",  "wordcount", "map",     "select",   "reject",  "selectattr",  "rejectattr", "batch"};
  return k;
}
const std::vector<std::string>& KnownTests() {
  static const std::vector<std::string> k = {
      "defined", "undefined", "none",        "string",   "number",   "integer", "float",    "boolean",     "true",
      "false",   "mapping",   "iterable",    "sequence", "callable", "odd",     "even",     "divisibleby", "eq",
      "equalto", "==",        "sameas",      "ne",       "!=",       "lt",      "lessthan", "<",           "le",
      "<=",      "gt",        "greaterthan", ">",        "ge",       ">=",      "in",       "lower",       "upper"};
  return k;
}

}  // namespace ropeserve::jinja::detail
