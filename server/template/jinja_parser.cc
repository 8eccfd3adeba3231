// Template source -> statements: the scanner of text / {{ }} / {% %}
// segments with whitespace control (trim_blocks, lstrip_blocks as
// transformers renders), and the statement parser; expressions are parsed
// by jinja_expr.h.
#include <algorithm>
#include <cctype>

#include "server/template/jinja_expr.h"

namespace ropeserve::jinja::detail {
namespace {

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
  bool strip_next = false;    // a "-" closing the previous tag
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
      if (text.compare(0, 1, "\n") == 0)
        text.erase(0, 1);
      else if (text.compare(0, 2, "\r\n") == 0)
        text.erase(0, 2);
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
          if (c == '\\') {
            ++k;
            continue;
          }
          if (c == quote) quote = 0;
          continue;
        }
        if (c == '\'' || c == '"') {
          quote = c;
          continue;
        }
      }
      if (src.compare(k, 2, close) == 0) {
        close_at = k;
        break;
      }
    }
    if (close_at == std::string::npos) {
      Throw("line " + std::to_string(line) + ": unclosed '{" + std::string(1, kind) + "' tag");
    }
    size_t inner_end = close_at;
    bool strip_after = false, keep_after = false;
    if (inner_end > inner && src[inner_end - 1] == '-') {
      strip_after = true;
      --inner_end;
    } else if (inner_end > inner && src[inner_end - 1] == '+') {
      keep_after = true;
      --inner_end;
    }
    const std::string body = src.substr(inner, inner_end - inner);
    if (kind == '{')
      out.push_back({Segment::kExpr, body, line});
    else if (kind == '%')
      out.push_back({Segment::kStmt, body, line});
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
      while (p.IsOp(",")) {
        p.Next();
        n->targets.push_back(p.ExpectName());
      }
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
      while (p.IsOp(",")) {
        p.Next();
        n->targets.push_back(p.ExpectName());
      }
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
        if (p.IsOp("=")) {
          p.Next();
          def = p.ParseExpr();
        }
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

NodeList ParseTemplate(const std::string& source) { return StmtParser(Scan(source)).ParseAll(); }

}  // namespace ropeserve::jinja::detail
