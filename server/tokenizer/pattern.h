// Patterns that split or replace inside a string: a literal string, a
// regular expression (Oniguruma, the engine Hugging Face tokenizers uses, so
// that \p{L}, lookahead and (?i:...) behave identically) or a predicate on
// characters. FindMatches returns the whole input as consecutive pieces,
// each flagged as match or not, like the reference's Pattern trait.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"
#include "server/tokenizer/normalized_string.h"

namespace ropeserve::tok {

struct PatternMatch {
  Offsets offsets;
  bool is_match;
};

class Pattern {
 public:
  virtual ~Pattern() = default;
  virtual StatusOr<std::vector<PatternMatch>> FindMatches(std::string_view s) const = 0;
};

class StringPattern final : public Pattern {
 public:
  explicit StringPattern(std::string literal) : literal_(std::move(literal)) {}
  StatusOr<std::vector<PatternMatch>> FindMatches(std::string_view s) const override;

 private:
  std::string literal_;
};

class CharPredicatePattern final : public Pattern {
 public:
  explicit CharPredicatePattern(std::function<bool(char32_t)> pred) : pred_(std::move(pred)) {}
  StatusOr<std::vector<PatternMatch>> FindMatches(std::string_view s) const override;

 private:
  std::function<bool(char32_t)> pred_;
};

class Regex final : public Pattern {
 public:
  // InvalidArgument naming the pattern if Oniguruma rejects it.
  static StatusOr<std::shared_ptr<Regex>> Compile(const std::string& pattern);
  ~Regex() override;
  StatusOr<std::vector<PatternMatch>> FindMatches(std::string_view s) const override;
  // Calls on_match(start, end) for every non-overlapping match.
  Status ForEachMatch(std::string_view s, const std::function<void(size_t, size_t)>& on_match) const;

 private:
  Regex() = default;
  void* regex_ = nullptr;  // OnigRegex; kept out of the header
  std::string source_;
};

}  // namespace ropeserve::tok
