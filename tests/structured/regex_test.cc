// Regular expressions and UTF-8 classes compiled to byte automata, checked
// against tables of matching and non-matching strings and against the
// code-point sets themselves.
#include "server/structured/regex.h"

#include <gtest/gtest.h>

#include "server/tokenizer/unicode.h"

namespace ropeserve::structured {
namespace {

Dfa CompileRegex(const std::string& pattern) {
  auto r = ParseRegex(pattern);
  EXPECT_TRUE(r.ok()) << pattern << ": " << r.status().message();
  auto d = Dfa::Compile(r->expr);
  EXPECT_TRUE(d.ok()) << pattern << ": " << d.status().message();
  return std::move(*d);
}

TEST(Regex, MatchesTables) {
  struct Case {
    const char* pattern;
    std::vector<const char*> yes, no;
  };
  const Case cases[] = {
      {"a|bc", {"a", "bc"}, {"", "b", "abc", "ac"}},
      {"[a-c]+", {"a", "cab", "bbbb"}, {"", "d", "abd"}},
      {"\\d{2,3}", {"12", "123"}, {"1", "1234", "ab"}},
      {"(ab)*c", {"c", "abc", "ababc"}, {"ab", "abac"}},
      {"(?:x|y){2}z?", {"xy", "yyz"}, {"x", "xyzz"}},
      {"^h.llo$", {"hello", "h\xC3\xA9llo"}, {"h\nllo", "hllo"}},
      {"[^a]", {"b", "\xC3\xA9", "\xF0\x9F\x98\x80"}, {"a", "", "bb"}},
      {"\\u00e9+", {"\xC3\xA9", "\xC3\xA9\xC3\xA9"}, {"e", ""}},
      {"\xC3\xA9t\xC3\xA9", {"\xC3\xA9t\xC3\xA9"}, {"ete"}},
      {"[\\w-]+@x\\.org", {"a-b_1@x.org"}, {"a b@x.org", "a@xxorg"}},
      {"\\s*\\S", {"  a", "a"}, {"  "}},
      {"a{2,}", {"aa", "aaaaa"}, {"a"}},
      {"a+?b", {"ab", "aab"}, {"b"}},
      {"[-a]", {"-", "a"}, {"b"}},
      {"\\(\\)\\[\\]\\{\\}", {"()[]{}"}, {"("}},
      {"(?<year>\\d{4})-\\d\\d", {"2024-01"}, {"24-01"}},
  };
  for (const Case& c : cases) {
    const Dfa d = CompileRegex(c.pattern);
    for (const char* s : c.yes) EXPECT_TRUE(d.Matches(s)) << c.pattern << " should match " << s;
    for (const char* s : c.no) EXPECT_FALSE(d.Matches(s)) << c.pattern << " should not match " << s;
  }
}

TEST(Regex, AnchorsAreReported) {
  auto r = ParseRegex("^ab$");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->anchored_start && r->anchored_end);
  r = ParseRegex("ab\\$");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->anchored_start || r->anchored_end);
}

TEST(Regex, RefusesWhatItCannotCompileNamingIt) {
  const std::pair<const char*, const char*> cases[] = {
      {"(?=a)b", "lookaround"},    {"(a)\\1", "backreference"}, {"a{1001}", "above 1000"}, {"\\bword", "word boundar"},
      {"a^b", "anchors"},          {"(ab", "missing ')'"},      {"ab)", "unbalanced"},     {"[abc", "unterminated"},
      {"*a", "nothing to repeat"}, {"\\p{L}", "property"},      {"a++", "possessive"},     {"[z-a]", "out of order"},
  };
  for (auto [pattern, words] : cases) {
    auto r = ParseRegex(pattern);
    ASSERT_FALSE(r.ok()) << pattern;
    EXPECT_NE(r.status().message().find(words), std::string::npos) << pattern << ": " << r.status().message();
  }
}

TEST(Regex, DeepNestingIsAnErrorNotARecursionWithoutEnd) {
  const std::string deep = std::string(65, '(') + "a" + std::string(65, ')');
  auto r = ParseRegex(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nest deeper"), std::string::npos);
  EXPECT_TRUE(ParseRegex(std::string(60, '(') + "a" + std::string(60, ')')).ok());
}

TEST(Regex, EmptyLanguageAndComplexityAreErrors) {
  auto nothing = Dfa::Compile(Expr::Nothing());
  ASSERT_FALSE(nothing.ok());
  EXPECT_NE(nothing.status().message().find("cannot be satisfied"), std::string::npos);
  // (a|b)*a(a|b){14}: the classic exponential determinization.
  auto r = ParseRegex("(a|b)*a(a|b){14}");
  ASSERT_TRUE(r.ok());
  auto big = Dfa::Compile(r->expr, AutomatonLimits{200000, 2000});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("too complex"), std::string::npos);
}

// The UTF-8 class of a code-point set accepts exactly the encodings of its
// members (checked at every range edge and on a stride over all planes).
TEST(Utf8Class, AcceptsExactlyTheSetsEncodings) {
  const CodePointSet sets[] = {
      Normalize({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}),
      Normalize({{'a', 'z'}, {0xE9, 0xE9}, {0x400, 0x4FF}, {0x1F600, 0x1F64F}}),
      Complement(Normalize({{'\n', '\n'}, {0x800, 0xFFFF}})),
      Normalize({{0x7F, 0x80}, {0x7FF, 0x800}, {0xFFFF, 0x10000}}),
  };
  for (const CodePointSet& set : sets) {
    auto d = Dfa::Compile(Utf8Class(set));
    ASSERT_TRUE(d.ok());
    auto member = [&](char32_t c) {
      for (auto r : set)
        if (c >= r.lo && c <= r.hi) return true;
      return false;
    };
    std::vector<char32_t> probes;
    for (char32_t c = 0; c <= 0x10FFFF; c += 97) probes.push_back(c);
    for (auto r : set)
      for (char32_t c : {r.lo, r.hi, static_cast<char32_t>(r.lo - 1), static_cast<char32_t>(r.hi + 1)})
        probes.push_back(c);
    for (char32_t c : {0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) probes.push_back(c);
    for (char32_t c : probes) {
      if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) continue;
      EXPECT_EQ(d->Matches(tok::ToUtf8(c)), member(c)) << std::hex << static_cast<unsigned>(c);
    }
    // Never a surrogate's encoding, never a truncated character.
    EXPECT_FALSE(d->Matches("\xED\xA0\x80"));
    EXPECT_FALSE(d->Matches("\xC3"));
  }
}

}  // namespace
}  // namespace ropeserve::structured
