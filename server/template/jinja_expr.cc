#include "server/template/jinja_expr.h"

#include <cctype>

#include "server/tokenizer/unicode.h"

namespace ropeserve::jinja::detail {

std::vector<Token> LexExpression(const std::string& src, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < src.size()) {
    const char c = src[i];
    if (c == '\n') {
      ++line;
      ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
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
            case 'n':
              s += '\n';
              break;
            case 't':
              s += '\t';
              break;
            case 'r':
              s += '\r';
              break;
            case '\\':
              s += '\\';
              break;
            case '\'':
              s += '\'';
              break;
            case '"':
              s += '"';
              break;
            case '0':
              s += '\0';
              break;
            case 'u':
            case 'x': {
              const size_t digits = x == 'u' ? 4 : 2;
              if (e + digits >= src.size() + 0 && e + digits > src.size() - 1)
                Throw("line " + std::to_string(line) + ": bad escape");
              const std::string hex = src.substr(e + 1, digits);
              char* endp = nullptr;
              const long cp = std::strtol(hex.c_str(), &endp, 16);
              if (endp != hex.c_str() + digits)
                Throw("line " + std::to_string(line) + ": bad \\" + std::string(1, x) + " escape");
              tok::AppendUtf8(&s, static_cast<char32_t>(cp));
              e += digits;
              break;
            }
            default:
              s += '\\';
              s += x;
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
    static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                 ">",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|", "="};
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

ExprPtr Make(Expr::Kind k, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->line = line;
  return e;
}

}  // namespace ropeserve::jinja::detail
