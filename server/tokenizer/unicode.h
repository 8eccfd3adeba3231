// UTF-8 and Unicode-property helpers for the tokenizer. The character data
// (categories, normalization, case mapping) comes from utf8proc; this file
// only adapts it to the predicates Hugging Face tokenizers uses (Rust's
// char::is_whitespace, is_alphanumeric, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"

namespace ropeserve::tok {

// Decodes the code point starting at s[i]; `len` receives its byte length.
// Input must be valid UTF-8 (checked once at the API boundary).
inline char32_t DecodeUtf8(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    *len = 2;
    return ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
  }
  if (b0 < 0xF0) {
    *len = 3;
    return ((b0 & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 6) |
           (static_cast<unsigned char>(s[i + 2]) & 0x3Fu);
  }
  *len = 4;
  return ((b0 & 0x07u) << 18) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 12) |
         ((static_cast<unsigned char>(s[i + 2]) & 0x3Fu) << 6) | (static_cast<unsigned char>(s[i + 3]) & 0x3Fu);
}

inline size_t Utf8Length(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }
inline size_t Utf8LeadLength(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }
void AppendUtf8(std::string* out, char32_t c);
std::string ToUtf8(char32_t c);

// Byte index of the first invalid UTF-8 sequence, or npos if `s` is valid
// (overlong forms, surrogates and code points past U+10FFFF are invalid).
size_t FindInvalidUtf8(std::string_view s);
Status CheckUtf8(std::string_view s, std::string_view what);
// Replaces every invalid sequence with U+FFFD the way Rust's
// String::from_utf8_lossy does (used when decoding bytes produced by a model).
std::string Utf8Lossy(std::string_view bytes);

size_t CountCodePoints(std::string_view s);
// The byte offset of each code point of `s`, then s.size(): turns the
// code-point offsets the tokenizer reports into byte offsets. `s` is valid
// UTF-8 (a truncated last sequence still ends at s.size()).
std::vector<size_t> CodePointStarts(std::string_view s);

// Rust char predicates, from utf8proc categories.
bool IsWhitespace(char32_t c);
bool IsAlphanumeric(char32_t c);
bool IsAlphabetic(char32_t c);
bool IsNumeric(char32_t c);
bool IsPunctuation(char32_t c);  // Unicode P* categories
bool IsMark(char32_t c);         // Mn, Mc, Me
// Rust regex's \w (Alphabetic, marks, Nd, Pc, Join_Control), which the
// reference's Whitespace pre-tokenizer uses (Oniguruma's \w differs).
bool IsRegexWordChar(char32_t c);
bool IsNonspacingMark(char32_t c);  // Mn
bool IsBertControl(char32_t c);     // BERT's _is_control: Cc/Cf/Cn/Co except \t \n \r
bool IsChineseChar(char32_t c);     // the CJK blocks BERT pads with spaces
// Rust char::to_lowercase (full mapping; may produce two code points).
std::u32string ToLowercase(char32_t c);
std::u32string ToUppercase(char32_t c);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string Normalize(std::string_view s, NormalForm form);

}  // namespace ropeserve::tok
