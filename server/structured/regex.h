// Regular expressions (the ECMAScript subset that JSON Schema `pattern`s and
// vLLM's guided_regex use) parsed into byte-level expressions, and the
// code-point sets they are made of, encoded as UTF-8.
#pragma once

#include <string_view>
#include <vector>

#include "server/common/status.h"
#include "server/structured/automaton.h"

namespace ropeserve::structured {

struct CodePointRange {
  char32_t lo, hi;  // inclusive
};
// Sorted, disjoint, never holding surrogates (U+D800..U+DFFF).
using CodePointSet = std::vector<CodePointRange>;

CodePointSet Normalize(CodePointSet set);  // sorts, merges, drops surrogates
CodePointSet Complement(const CodePointSet& set);
CodePointSet Intersect(const CodePointSet& a, const CodePointSet& b);
CodePointSet AllCodePoints();

// One character from `set`, as its UTF-8 bytes.
Expr Utf8Class(const CodePointSet& set);

struct ParsedRegex {
  Expr expr = Expr::Empty();
  bool anchored_start = false;  // the pattern began with ^
  bool anchored_end = false;    // and ended with $
};

// Supported: literals (any UTF-8), `.`, classes `[...]` / `[^...]` with
// ranges, \d \w \s and their negations, escapes (\n \t \r \f \v \0 \xHH
// \uHHHH \u{H...} and escaped punctuation), groups `(...)`, `(?:...)`,
// `(?<name>...)`, alternation, quantifiers * + ? {n} {n,} {n,m} (lazy `?`
// accepted: it does not change the language), ^ at the start and $ at the
// end. Refused with InvalidArgument naming the construct: backreferences,
// lookaround, word boundaries, anchors elsewhere, possessive quantifiers,
// repeat counts above 1000.
//
// `allowed`: when given, every character the pattern can produce is
// restricted to it (a JSON string's unescaped characters, say).
StatusOr<ParsedRegex> ParseRegex(std::string_view pattern, const CodePointSet* allowed = nullptr);

}  // namespace ropeserve::structured
