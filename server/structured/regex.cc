#include "server/structured/regex.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "server/tokenizer/unicode.h"

namespace ropeserve::structured {

namespace {
constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxRepeat = 1000;
}  // namespace

CodePointSet Normalize(CodePointSet set) {
  CodePointSet split;
  for (auto r : set) {
    if (r.lo > r.hi || r.lo > kMaxCodePoint) continue;
    r.hi = std::min(r.hi, kMaxCodePoint);
    // Cut out the surrogates.
    if (r.lo < 0xD800 && r.hi >= 0xD800) {
      split.push_back({r.lo, 0xD7FF});
      if (r.hi > 0xDFFF) split.push_back({0xE000, r.hi});
    } else if (r.lo >= 0xD800 && r.lo <= 0xDFFF) {
      if (r.hi > 0xDFFF) split.push_back({0xE000, r.hi});
    } else {
      split.push_back(r);
    }
  }
  std::sort(split.begin(), split.end(), [](auto a, auto b) { return a.lo < b.lo; });
  CodePointSet out;
  for (auto r : split) {
    if (!out.empty() && r.lo <= out.back().hi + 1)
      out.back().hi = std::max(out.back().hi, r.hi);
    else
      out.push_back(r);
  }
  return out;
}

CodePointSet AllCodePoints() { return Normalize({{0, kMaxCodePoint}}); }

CodePointSet Complement(const CodePointSet& set) {
  const CodePointSet s = Normalize(set);
  CodePointSet out;
  char32_t next = 0;
  for (auto r : s) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return Normalize(out);
}

CodePointSet Intersect(const CodePointSet& a, const CodePointSet& b) {
  CodePointSet out;
  for (auto x : a)
    for (auto y : b) {
      const char32_t lo = std::max(x.lo, y.lo), hi = std::min(x.hi, y.hi);
      if (lo <= hi) out.push_back({lo, hi});
    }
  return Normalize(out);
}

namespace {

// Byte ranges of the UTF-8 encodings of [lo, hi], as sequences of byte
// ranges (the classic split: each piece shares its length and has
// independent continuation-byte ranges).
void SplitUtf8(char32_t lo, char32_t hi, std::vector<Expr>& out) {
  static const char32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
  for (char32_t end : kLengthEnds) {
    if (lo <= end && hi > end) {
      SplitUtf8(lo, end, out);
      SplitUtf8(end + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    ByteSet s;
    for (char32_t c = lo; c <= hi; ++c) s.set(c);
    out.push_back(Expr::Bytes(s));
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitUtf8(lo, lo | m, out);
        SplitUtf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitUtf8(lo, (hi & ~m) - 1, out);
        SplitUtf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = tok::ToUtf8(lo), b = tok::ToUtf8(hi);
  std::vector<Expr> seq;
  for (std::size_t k = 0; k < a.size(); ++k) {
    ByteSet s;
    for (int c = static_cast<unsigned char>(a[k]); c <= static_cast<unsigned char>(b[k]); ++c)
      s.set(static_cast<std::size_t>(c));
    seq.push_back(Expr::Bytes(s));
  }
  out.push_back(Expr::Seq(std::move(seq)));
}

}  // namespace

Expr Utf8Class(const CodePointSet& set) {
  std::vector<Expr> options;
  ByteSet ascii;
  for (auto r : Normalize(set)) {
    // ASCII in one byte set: [a-z0-9_] is one transition, not three.
    for (char32_t c = r.lo; c <= std::min<char32_t>(r.hi, 0x7F); ++c) ascii.set(c);
    if (r.hi > 0x7F) SplitUtf8(std::max<char32_t>(r.lo, 0x80), r.hi, options);
  }
  if (ascii.any()) options.insert(options.begin(), Expr::Bytes(ascii));
  if (options.empty()) return Expr::Nothing();
  return Expr::Alt(std::move(options));
}

namespace {

CodePointSet Digits() { return {{'0', '9'}}; }
CodePointSet Word() { return Normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
// ECMAScript's \s: WhiteSpace and LineTerminator.
CodePointSet Space() {
  return Normalize({{'\t', '\r'},
                    {' ', ' '},
                    {0xA0, 0xA0},
                    {0x1680, 0x1680},
                    {0x2000, 0x200A},
                    {0x2028, 0x2029},
                    {0x202F, 0x202F},
                    {0x205F, 0x205F},
                    {0x3000, 0x3000},
                    {0xFEFF, 0xFEFF}});
}
CodePointSet Dot() { return Complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}); }

class Parser {
 public:
  Parser(std::string_view p, const CodePointSet* allowed) : p_(p), allowed_(allowed) {}

  StatusOr<ParsedRegex> Parse() {
    ParsedRegex out;
    if (!p_.empty() && p_[0] == '^') {
      out.anchored_start = true;
      ++i_;
    }
    std::size_t end = p_.size();
    if (end > i_ && p_[end - 1] == '$' && !(end >= 2 && p_[end - 2] == '\\')) {
      out.anchored_end = true;
      p_ = p_.substr(0, end - 1);
    }
    RS_ASSIGN_OR_RETURN(out.expr, Alternation());
    if (i_ < p_.size()) return Error("unbalanced ')'");
    return out;
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgument("regular expression: " + what + " at offset " + std::to_string(i_));
  }
  bool AtEnd() const { return i_ >= p_.size(); }
  char Peek() const { return p_[i_]; }

  Expr Chars(const CodePointSet& set) const { return Utf8Class(allowed_ ? Intersect(set, *allowed_) : set); }

  StatusOr<Expr> Alternation() {
    std::vector<Expr> options;
    RS_ASSIGN_OR_RETURN(Expr first, Sequence());
    options.push_back(std::move(first));
    while (!AtEnd() && Peek() == '|') {
      ++i_;
      RS_ASSIGN_OR_RETURN(Expr next, Sequence());
      options.push_back(std::move(next));
    }
    return Expr::Alt(std::move(options));
  }

  StatusOr<Expr> Sequence() {
    std::vector<Expr> parts;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      RS_ASSIGN_OR_RETURN(Expr atom, Atom());
      RS_ASSIGN_OR_RETURN(Expr quantified, Quantifier(std::move(atom)));
      parts.push_back(std::move(quantified));
    }
    return Expr::Seq(std::move(parts));
  }

  StatusOr<int> Number() {
    std::size_t start = i_;
    long long v = 0;
    while (!AtEnd() && std::isdigit(static_cast<unsigned char>(Peek()))) {
      v = v * 10 + (Peek() - '0');
      if (v > kMaxRepeat) return Error("repeat counts above " + std::to_string(kMaxRepeat) + " are not supported");
      ++i_;
    }
    if (i_ == start) return Error("expected a number in {}");
    return static_cast<int>(v);
  }

  StatusOr<Expr> Quantifier(Expr atom) {
    for (;;) {
      if (AtEnd()) return atom;
      int min, max;
      const char c = Peek();
      if (c == '*') {
        min = 0;
        max = Expr::kUnbounded;
        ++i_;
      } else if (c == '+') {
        min = 1;
        max = Expr::kUnbounded;
        ++i_;
      } else if (c == '?') {
        min = 0;
        max = 1;
        ++i_;
      } else if (c == '{' && i_ + 1 < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i_ + 1]))) {
        ++i_;
        RS_ASSIGN_OR_RETURN(min, Number());
        max = min;
        if (!AtEnd() && Peek() == ',') {
          ++i_;
          if (!AtEnd() && Peek() == '}')
            max = Expr::kUnbounded;
          else {
            RS_ASSIGN_OR_RETURN(max, Number());
          }
        }
        if (AtEnd() || Peek() != '}') return Error("unterminated {n,m}");
        ++i_;
        if (max != Expr::kUnbounded && max < min) return Error("{n,m} with m < n");
      } else {
        return atom;
      }
      if (!AtEnd() && Peek() == '?')
        ++i_;  // lazy: the same language
      else if (!AtEnd() && Peek() == '+')
        return Error("possessive quantifiers are not supported");
      atom = Expr::Repeat(std::move(atom), min, max);
    }
  }

  StatusOr<char32_t> Hex(std::size_t digits) {
    if (i_ + digits > p_.size()) return Error("truncated escape");
    char32_t v = 0;
    for (std::size_t k = 0; k < digits; ++k) {
      const char c = p_[i_ + k];
      if (!std::isxdigit(static_cast<unsigned char>(c))) return Error("bad hex digit in escape");
      v = v * 16 +
          static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10));
    }
    i_ += digits;
    return v;
  }

  // After a backslash: a class (\d) or one code point.
  StatusOr<CodePointSet> Escape(bool in_class) {
    if (AtEnd()) return Error("trailing backslash");
    const char c = p_[i_++];
    switch (c) {
      case 'd':
        return Digits();
      case 'D':
        return Complement(Digits());
      case 'w':
        return Word();
      case 'W':
        return Complement(Word());
      case 's':
        return Space();
      case 'S':
        return Complement(Space());
      case 'n':
        return CodePointSet{{'\n', '\n'}};
      case 't':
        return CodePointSet{{'\t', '\t'}};
      case 'r':
        return CodePointSet{{'\r', '\r'}};
      case 'f':
        return CodePointSet{{'\f', '\f'}};
      case 'v':
        return CodePointSet{{'\v', '\v'}};
      case '0':
        return CodePointSet{{0, 0}};
      case 'x': {
        RS_ASSIGN_OR_RETURN(char32_t v, Hex(2));
        return CodePointSet{{v, v}};
      }
      case 'u': {
        if (!AtEnd() && Peek() == '{') {
          ++i_;
          std::size_t n = 0;
          while (i_ + n < p_.size() && p_[i_ + n] != '}') ++n;
          if (n == 0 || n > 6 || i_ + n >= p_.size()) return Error("bad \\u{...} escape");
          RS_ASSIGN_OR_RETURN(char32_t v, Hex(n));
          ++i_;
          return Normalize({{v, v}});
        }
        RS_ASSIGN_OR_RETURN(char32_t v, Hex(4));
        return Normalize({{v, v}});
      }
      case 'b':
        if (in_class) return CodePointSet{{'\b', '\b'}};
        return Error("word boundaries (\\b) are not supported");
      case 'B':
        return Error("word boundaries (\\B) are not supported");
      case 'p':
      case 'P':
        return Error("Unicode property escapes (\\p) are not supported");
      case 'k':
        return Error("named backreferences are not supported");
      default:
        if (std::isdigit(static_cast<unsigned char>(c))) return Error("backreferences are not supported");
        if (std::isalnum(static_cast<unsigned char>(c))) return Error(std::string("unknown escape \\") + c);
        return CodePointSet{{static_cast<char32_t>(static_cast<unsigned char>(c)),
                             static_cast<char32_t>(static_cast<unsigned char>(c))}};
    }
  }

  char32_t NextCodePoint() {
    std::size_t len;
    const char32_t cp = tok::DecodeUtf8(p_, i_, &len);
    i_ += len;
    return cp;
  }

  StatusOr<Expr> Class() {
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++i_;
    }
    CodePointSet set;
    bool first = true;
    while (!AtEnd() && (Peek() != ']' || first)) {
      first = false;
      CodePointSet item;
      std::optional<char32_t> single;
      if (Peek() == '\\') {
        ++i_;
        RS_ASSIGN_OR_RETURN(item, Escape(true));
        if (item.size() == 1 && item[0].lo == item[0].hi) single = item[0].lo;
      } else if (Peek() == '[' && i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
        return Error("POSIX classes ([:alpha:]) are not supported");
      } else {
        single = NextCodePoint();
        item = Normalize({{*single, *single}});
      }
      // A range a-b (a '-' before ']' is a literal).
      if (single && i_ + 1 < p_.size() && Peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        char32_t hi;
        if (Peek() == '\\') {
          ++i_;
          RS_ASSIGN_OR_RETURN(CodePointSet e, Escape(true));
          if (e.size() != 1 || e[0].lo != e[0].hi) return Error("a class cannot end a range");
          hi = e[0].lo;
        } else {
          hi = NextCodePoint();
        }
        if (hi < *single) return Error("range out of order in character class");
        item = Normalize({{*single, hi}});
      }
      set.insert(set.end(), item.begin(), item.end());
    }
    if (AtEnd()) return Error("unterminated character class");
    ++i_;  // ']'
    set = Normalize(set);
    return Chars(negate ? Complement(set) : set);
  }

  StatusOr<Expr> Atom() {
    const char c = Peek();
    switch (c) {
      case '(': {
        ++i_;
        if (++depth_ > kMaxGroupDepth) return Error("groups nest deeper than " + std::to_string(kMaxGroupDepth));
        if (!AtEnd() && Peek() == '?') {
          ++i_;
          if (AtEnd()) return Error("unterminated group");
          if (Peek() == ':') {
            ++i_;
          } else if (Peek() == '<' && i_ + 1 < p_.size() && p_[i_ + 1] != '=' && p_[i_ + 1] != '!') {
            while (!AtEnd() && Peek() != '>') ++i_;
            if (AtEnd()) return Error("unterminated group name");
            ++i_;
          } else {
            return Error("lookaround and inline flags ((?=, (?!, (?<=, (?i) are not supported");
          }
        }
        RS_ASSIGN_OR_RETURN(Expr inner, Alternation());
        if (AtEnd() || Peek() != ')') return Error("missing ')'");
        ++i_;
        --depth_;
        return inner;
      }
      case '[':
        ++i_;
        return Class();
      case '.':
        ++i_;
        return Chars(Dot());
      case '\\': {
        ++i_;
        RS_ASSIGN_OR_RETURN(CodePointSet set, Escape(false));
        return Chars(set);
      }
      case '^':
      case '$':
        return Error("anchors are only supported at the start and the end");
      case '*':
      case '+':
      case '?':
        return Error("nothing to repeat");
      default: {
        const char32_t cp = NextCodePoint();
        return Chars(Normalize({{cp, cp}}));
      }
    }
  }

  static constexpr int kMaxGroupDepth = 64;
  std::string_view p_;
  const CodePointSet* allowed_;
  std::size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

StatusOr<ParsedRegex> ParseRegex(std::string_view pattern, const CodePointSet* allowed) {
  if (tok::FindInvalidUtf8(pattern) != std::string_view::npos)
    return InvalidArgument("regular expression: not valid UTF-8");
  return Parser(pattern, allowed).Parse();
}

}  // namespace ropeserve::structured
