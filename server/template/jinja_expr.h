// Jinja expressions: the tokenizer of an expression's source and the
// expression parser (Jinja2's precedence). The statement parser
// (jinja_parser.cc) drives it tag by tag. Internal to server/template.
#pragma once

#include <string>
#include <vector>

#include "server/template/jinja_ast.h"

namespace ropeserve::jinja::detail {

// ------------------------------------------------------------------ lexing

enum class Tk { kName, kString, kInt, kFloat, kOp, kEnd };
struct Token {
  Tk kind;
  std::string text;
  int line;
};

// The tokens of one {{ }} or {% %} tag; Throw on a malformed one.
std::vector<Token> LexExpression(const std::string& src, int line);

ExprPtr Make(Expr::Kind k, int line);

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
    while (IsName("or")) {
      ++p_;
      e = Binary(Expr::kOr, std::move(e), ParseAnd());
    }
    return e;
  }
  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (IsName("and")) {
      ++p_;
      e = Binary(Expr::kAnd, std::move(e), ParseNot());
    }
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
    while (IsOp("~")) {
      ++p_;
      e = Binary(Expr::kBinary, std::move(e), ParseAdd(), "~");
    }
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
    while (IsOp("**")) {
      ++p_;
      e = Binary(Expr::kBinary, std::move(e), ParseUnary(), "**");
    }
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
        while (IsOp(".")) {
          ++p_;
          f->name += "." + ExpectName();
        }
        f->kids.push_back(std::move(e));
        if (IsOp("(")) {
          ++p_;
          ParseCallArgs(f.get());
        }
        e = std::move(f);
      } else if (IsName("is")) {
        ++p_;
        auto t = Make(Expr::kTest, e->line);
        if (IsName("not")) {
          ++p_;
          t->negated = true;
        }
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
        if (Peek().kind == Tk::kInt)
          a->name = Next().text;
        else
          a->name = ExpectName();
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
      case Tk::kFloat:
        return lit(Value::Float(std::strtod(t.text.c_str(), nullptr)));
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
          if (IsOp(")")) {
            ++p_;
            return Make(Expr::kTuple, t.line);
          }
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
      default:
        break;
    }
    Throw("line " + std::to_string(t.line) + ": unexpected '" + t.text + "' in expression");
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  int depth_ = 0;
};

}  // namespace ropeserve::jinja::detail
