#include <algorithm>
#include <cmath>

#include "server/template/jinja_renderer.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::jinja::detail {

Renderer::Renderer(const nlohmann::ordered_json& context) {
  scopes_.emplace_back();
  InstallGlobals();
  if (context.is_object()) {
    for (auto it = context.begin(); it != context.end(); ++it) scopes_[0][it.key()] = FromJson(it.value());
  }
}

void Renderer::Render(const NodeList& body, std::string& out) {
  for (const auto& n : body) {
    // A budget on work and output: a template (or a conversation fed to
    // it) must not make a request loop or allocate without bound.
    if (++steps_ > kMaxSteps) Throw("template exceeded its work limit (" + std::to_string(kMaxSteps) + " steps)");
    Exec(*n, out);
    if (out.size() > kMaxOutputBytes)
      Throw("template output exceeds " + std::to_string(kMaxOutputBytes >> 20) + " MiB");
  }
}

Value Renderer::Lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return f->second;
  }
  auto g = globals_.find(name);
  if (g != globals_.end()) return g->second;
  return Value();
}

void Renderer::InstallGlobals() {
  globals_["raise_exception"] = Value::Fn([](Args& a) -> Value {
    throw JinjaError{a.pos.empty() ? std::string("raise_exception called") : ToStr(a.pos[0]), true};
  });
  globals_["range"] = Value::Fn([](Args& a) -> Value {
    std::int64_t start = 0, stop = 0, step = 1;
    auto num = [](const Value& v) {
      if (v.kind != Value::kInt) Throw("range: arguments must be integers");
      return v.i;
    };
    if (a.pos.size() == 1)
      stop = num(a.pos[0]);
    else if (a.pos.size() >= 2) {
      start = num(a.pos[0]);
      stop = num(a.pos[1]);
    }
    if (a.pos.size() == 3) step = num(a.pos[2]);
    if (a.pos.empty() || a.pos.size() > 3) Throw("range: expected 1 to 3 arguments");
    if (step == 0) Throw("range: step must not be zero");
    Array out;
    for (std::int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
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

void Renderer::Exec(const Node& n, std::string& out) {
  switch (n.kind) {
    case Node::kText:
      out += n.text;
      return;
    case Node::kOutput:
      out += ToStr(Eval(*n.exprs[0]));
      return;
    case Node::kBlock:
      Render(n.bodies[0], out);
      return;
    case Node::kIf:
      for (size_t k = 0; k < n.exprs.size(); ++k) {
        if (Eval(*n.exprs[k]).Truthy()) {
          Render(n.bodies[k], out);
          return;
        }
      }
      if (n.has_else) Render(n.bodies.back(), out);
      return;
    case Node::kFor:
      ExecFor(n, out);
      return;
    case Node::kSet: {
      Value v = Eval(*n.exprs[0]);
      if (!n.attr.empty()) {
        Value ns = Lookup(n.text);
        if (ns.kind != Value::kObject)
          Throw("line " + std::to_string(n.line) + ": cannot set attribute of " + KindName(ns) + " '" + n.text + "'");
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
    case Node::kMacro:
      DefineMacro(n);
      return;
    case Node::kBreak:
      throw LoopControl{LoopControl::kBreak};
    case Node::kContinue:
      throw LoopControl{LoopControl::kContinue};
  }
}

void Renderer::Assign(const std::vector<std::string>& targets, Value v, int line) {
  if (targets.size() == 1) {
    scopes_.back()[targets[0]] = std::move(v);
    return;
  }
  if (v.kind != Value::kArray || v.arr->size() != targets.size()) {
    Throw("line " + std::to_string(line) + ": cannot unpack " + KindName(v) + " into " +
          std::to_string(targets.size()) + " names");
  }
  for (size_t k = 0; k < targets.size(); ++k) scopes_.back()[targets[k]] = (*v.arr)[k];
}

Array Renderer::Iterate(const Value& v, int line) {
  switch (v.kind) {
    case Value::kArray:
      return *v.arr;
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
    case Value::kUndefined:
    case Value::kNone:
      return {};
    default:
      Throw("line " + std::to_string(line) + ": " + KindName(v) + " is not iterable");
  }
}

void Renderer::ExecFor(const Node& n, std::string& out) {
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
  const std::int64_t len = static_cast<std::int64_t>(items.size());
  for (std::int64_t k = 0; k < len; ++k) {
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

void Renderer::DefineMacro(const Node& n) {
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
      if (k < a.pos.size())
        args[name] = a.pos[k];
      else
        args[name] = def ? self->Eval(*def) : Value();
    }
    if (a.pos.size() > node->params.size())
      Throw("macro '" + node->text + "' takes " + std::to_string(node->params.size()) + " arguments");
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

Args Renderer::EvalArgs(const Expr& e, size_t first) {
  Args a;
  const size_t nkw = e.kw.size();
  const size_t npos = e.kids.size() - first - nkw;
  for (size_t k = 0; k < npos; ++k) a.pos.push_back(Eval(*e.kids[first + k]));
  for (size_t k = 0; k < nkw; ++k) a.kw.emplace_back(e.kw[k], Eval(*e.kids[first + npos + k]));
  return a;
}

const Value* Renderer::Kw(const Args& a, const char* name) {
  for (const auto& [k, v] : a.kw)
    if (k == name) return &v;
  return nullptr;
}

const Value* Renderer::Arg(const Args& a, size_t pos, const char* name) {
  if (pos < a.pos.size()) return &a.pos[pos];
  return Kw(a, name);
}

Value Renderer::Attr(const Value& obj, const std::string& name) {
  if (obj.kind == Value::kObject) {
    if (const Value* v = obj.Find(name)) return *v;
    return Value();
  }
  if (obj.kind == Value::kArray && !name.empty() && std::isdigit(static_cast<unsigned char>(name[0]))) {
    return Index(obj, Value::Int(std::stoll(name)));
  }
  return Value();
}

Value Renderer::Index(const Value& obj, const Value& key) {
  if (obj.kind == Value::kArray || obj.kind == Value::kString) {
    if (key.kind != Value::kInt) {
      if (obj.kind == Value::kArray && key.kind == Value::kString) return Value();
      Throw(std::string(KindName(obj)) + " indices must be integers");
    }
    if (obj.kind == Value::kArray) {
      std::int64_t i = key.i < 0 ? key.i + static_cast<std::int64_t>(obj.arr->size()) : key.i;
      if (i < 0 || i >= static_cast<std::int64_t>(obj.arr->size())) return Value();
      return (*obj.arr)[static_cast<size_t>(i)];
    }
    const std::u32string u = U32(obj.s);
    std::int64_t i = key.i < 0 ? key.i + static_cast<std::int64_t>(u.size()) : key.i;
    if (i < 0 || i >= static_cast<std::int64_t>(u.size())) return Value();
    return Value::Str(tok::ToUtf8(u[static_cast<size_t>(i)]));
  }
  if (obj.kind == Value::kObject) {
    if (const Value* v = obj.Find(ToStr(key))) return *v;
    return Value();
  }
  return Value();
}

Value Renderer::Eval(const Expr& e) {
  switch (e.kind) {
    case Expr::kLiteral:
      return e.literal;
    case Expr::kName:
      return Lookup(e.name);
    case Expr::kList:
    case Expr::kTuple: {
      Array a;
      for (const auto& k : e.kids) a.push_back(Eval(*k));
      return Value::List(std::move(a));
    }
    case Expr::kDict: {
      Value d = Value::Dict();
      for (size_t k = 0; k + 1 < e.kids.size(); k += 2) d.Set(ToStr(Eval(*e.kids[k])), Eval(*e.kids[k + 1]));
      return d;
    }
    case Expr::kAttr:
      return Attr(Eval(*e.kids[0]), e.name);
    case Expr::kIndex:
      return Index(Eval(*e.kids[0]), Eval(*e.kids[1]));
    case Expr::kSlice: {
      const Value obj = Eval(*e.kids[0]);
      std::optional<std::int64_t> parts[3];
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
    case Expr::kCall:
      return EvalCall(e);
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
    case Expr::kNeg:
    case Expr::kPos: {
      const Value v = Eval(*e.kids[0]);
      if (!v.number()) Throw("line " + std::to_string(e.line) + ": bad operand for unary minus: " + KindName(v));
      if (e.kind == Expr::kPos) return v;
      return v.kind == Value::kFloat ? Value::Float(-v.f) : Value::Int(-(v.kind == Value::kBool ? v.b : v.i));
    }
    case Expr::kNot:
      return Value::Bool(!Eval(*e.kids[0]).Truthy());
    case Expr::kAnd: {
      Value a = Eval(*e.kids[0]);
      return a.Truthy() ? Eval(*e.kids[1]) : a;
    }
    case Expr::kOr: {
      Value a = Eval(*e.kids[0]);
      return a.Truthy() ? a : Eval(*e.kids[1]);
    }
    case Expr::kCond:
      return Eval(*e.kids[1]).Truthy() ? Eval(*e.kids[0]) : Eval(*e.kids[2]);
    case Expr::kCompare:
      return Value::Bool(EvalCompare(e.name, Eval(*e.kids[0]), Eval(*e.kids[1]), e.line));
    case Expr::kBinary:
      return EvalBinary(e.name, Eval(*e.kids[0]), Eval(*e.kids[1]), e.line);
  }
  Throw("internal: unknown expression");
}

bool Renderer::Contains(const Value& container, const Value& item, int line) {
  switch (container.kind) {
    case Value::kString:
      if (item.kind != Value::kString)
        Throw("line " + std::to_string(line) + ": 'in <string>' needs a string on the left");
      return container.s.find(item.s) != std::string::npos;
    case Value::kArray:
      for (const Value& v : *container.arr)
        if (Equal(v, item)) return true;
      return false;
    case Value::kObject:
      return container.Find(ToStr(item)) != nullptr;
    case Value::kUndefined:
    case Value::kNone:
      return false;
    default:
      Throw("line " + std::to_string(line) + ": argument of type " + KindName(container) + " is not iterable");
  }
}

bool Renderer::EvalCompare(const std::string& op, const Value& a, const Value& b, int line) {
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

Value Renderer::EvalBinary(const std::string& op, const Value& a, const Value& b, int line) {
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
    for (std::int64_t k = 0; k < b.i; ++k) r += a.s;
    return Value::Str(std::move(r));
  }
  if (!a.number() || !b.number()) {
    Throw("line " + std::to_string(line) + ": unsupported operand types for " + op + ": " + KindName(a) + " and " +
          KindName(b));
  }
  const bool ints = a.kind != Value::kFloat && b.kind != Value::kFloat;
  const std::int64_t x = a.kind == Value::kBool ? a.b : a.i, y = b.kind == Value::kBool ? b.b : b.i;
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
      std::int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return Value::Int(op == "//" ? q : r);
    }
    const double q = std::floor(fx / fy);
    return Value::Float(op == "//" ? q : fx - q * fy);
  }
  if (op == "**") {
    if (ints && y >= 0) {
      std::int64_t r = 1;
      for (std::int64_t k = 0; k < y; ++k) r *= x;
      return Value::Int(r);
    }
    return Value::Float(std::pow(fx, fy));
  }
  Throw("line " + std::to_string(line) + ": unknown operator " + op);
}

Value Renderer::EvalCall(const Expr& e) {
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
    Throw("line " + std::to_string(e.line) + ": " + what + " is " +
          (f.undefined() ? "undefined" : std::string("not callable")));
  }
  return (*f.fn)(a);
}

}  // namespace ropeserve::jinja::detail
