#include "server/tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace ropeserve::tok {

void AppendUtf8(std::string* out, char32_t c) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string ToUtf8(char32_t c) {
  std::string s;
  AppendUtf8(&s, c);
  return s;
}

namespace {
// Length of the valid sequence at s[i], 0 if invalid, -1 if truncated (a
// valid prefix that runs into the end of the input).
int ValidSequenceLength(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  int n;
  unsigned lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF)
    n = 2;
  else if (b0 == 0xE0) {
    n = 3;
    lo = 0xA0;
  } else if (b0 >= 0xE1 && b0 <= 0xEC)
    n = 3;
  else if (b0 == 0xED) {
    n = 3;
    hi = 0x9F;
  } else if (b0 >= 0xEE && b0 <= 0xEF)
    n = 3;
  else if (b0 == 0xF0) {
    n = 4;
    lo = 0x90;
  } else if (b0 >= 0xF1 && b0 <= 0xF3)
    n = 4;
  else if (b0 == 0xF4) {
    n = 4;
    hi = 0x8F;
  } else
    return 0;
  for (int k = 1; k < n; ++k) {
    if (i + k >= s.size()) return -1;
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return 0;
  }
  return n;
}
}  // namespace

size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const int n = ValidSequenceLength(s, i);
    if (n <= 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

Status CheckUtf8(std::string_view s, std::string_view what) {
  const size_t bad = FindInvalidUtf8(s);
  if (bad == std::string_view::npos) return Status::Ok();
  return InvalidArgument(std::string(what) + " is not valid UTF-8 (invalid byte sequence at byte " +
                         std::to_string(bad) + ")");
}

std::string Utf8Lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const int n = ValidSequenceLength(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    // Rust replaces the maximal invalid prefix of a sequence with one U+FFFD.
    size_t skip = 1;
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 >= 0xC2 && b0 <= 0xF4) {
      unsigned lo = 0x80, hi = 0xBF;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
      const size_t want = Utf8LeadLength(b0);
      while (skip < want && i + skip < s.size()) {
        const auto b = static_cast<unsigned char>(s[i + skip]);
        const unsigned l = skip == 1 ? lo : 0x80, h = skip == 1 ? hi : 0xBF;
        if (b < l || b > h) break;
        ++skip;
      }
    }
    out.append("\xEF\xBF\xBD");
    i += skip;
  }
  return out;
}

std::vector<size_t> CodePointStarts(std::string_view s) {
  std::vector<size_t> starts;
  starts.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); i += std::min(Utf8LeadLength(static_cast<unsigned char>(s[i])), s.size() - i))
    starts.push_back(i);
  starts.push_back(s.size());
  return starts;
}

size_t CountCodePoints(std::string_view s) {
  size_t n = 0;
  for (char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

namespace {
utf8proc_category_t Category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
}  // namespace

bool IsWhitespace(char32_t c) {
  // Unicode White_Space = Zs, Zl, Zp plus these controls.
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0x85) return true;
  if (c < 0x80) return false;
  const auto cat = Category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool IsAlphabetic(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  const auto cat = Category(c);
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

bool IsNumeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const auto cat = Category(c);
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool IsAlphanumeric(char32_t c) { return IsAlphabetic(c) || IsNumeric(c); }

bool IsPunctuation(char32_t c) {
  const auto cat = Category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

bool IsMark(char32_t c) {
  const auto cat = Category(c);
  return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME;
}

bool IsRegexWordChar(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? true : (c >= '0' && c <= '9') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;  // Join_Control
  // Other_Alphabetic symbols (circled and squared Latin letters).
  if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
      (c >= 0x1F170 && c <= 0x1F189)) {
    return true;
  }
  const auto cat = Category(c);
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) || cat == UTF8PROC_CATEGORY_NL ||
         cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC ||
         cat == UTF8PROC_CATEGORY_ME || cat == UTF8PROC_CATEGORY_PC;
}

bool IsNonspacingMark(char32_t c) { return Category(c) == UTF8PROC_CATEGORY_MN; }

bool IsBertControl(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto cat = Category(c);
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CN ||
         cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CS;
}

bool IsChineseChar(char32_t c) {
  // The block list is BERT's definition (not a Unicode property).
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::u32string ToLowercase(char32_t c) {
  // utf8proc has the simple mapping; U+0130 is the one code point whose full
  // lowercase mapping (SpecialCasing.txt, unconditional) differs.
  if (c == 0x130) return U"i\u0307";
  return std::u32string(1, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

std::u32string ToUppercase(char32_t c) {
  return std::u32string(1, static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))));
}

std::string Normalize(std::string_view s, NormalForm form) {
  bool ascii = true;
  for (char ch : s) ascii &= static_cast<unsigned char>(ch) < 0x80;
  if (ascii) return std::string(s);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::kNFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::kNFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::kNFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &out, static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(s);  // only for invalid UTF-8, rejected earlier
  std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace ropeserve::tok
