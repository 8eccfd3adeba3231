// Pre-tokenizers (tokenizer.json "pre_tokenizer").
#include <nlohmann/json.hpp>

#include "server/tokenizer/component_json.h"
#include "server/tokenizer/components.h"
#include "server/tokenizer/pattern.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::tok {

using nlohmann::json;

StatusOr<std::shared_ptr<Pattern>> MakePattern(const json& j, const std::string& where);

namespace {

// GPT-2's pre-tokenization regex (the ByteLevel pre-tokenizer's use_regex).
constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Flips which pieces count as matches (the reference's Invert wrapper).
class InvertPattern final : public Pattern {
 public:
  explicit InvertPattern(std::shared_ptr<Pattern> p) : p_(std::move(p)) {}
  StatusOr<std::vector<PatternMatch>> FindMatches(std::string_view s) const override {
    RS_ASSIGN_OR_RETURN(auto ms, p_->FindMatches(s));
    for (auto& m : ms) m.is_match = !m.is_match;
    return ms;
  }

 private:
  std::shared_ptr<Pattern> p_;
};

// `\w+|[^\w\s]+` with Rust regex semantics: runs of word characters and
// runs of other non-space characters are matches, whitespace is not.
class WordOrSymbolRuns final : public Pattern {
 public:
  StatusOr<std::vector<PatternMatch>> FindMatches(std::string_view s) const override {
    std::vector<PatternMatch> out;
    if (s.empty()) return std::vector<PatternMatch>{{{0, 0}, false}};
    int prev_class = -1;  // 0 word, 1 other, 2 space
    for (size_t i = 0; i < s.size();) {
      size_t n;
      const char32_t c = DecodeUtf8(s, i, &n);
      const int cls = IsRegexWordChar(c) ? 0 : IsWhitespace(c) ? 2 : 1;
      if (cls == prev_class && !out.empty()) {
        out.back().offsets.end = i + n;
      } else {
        out.push_back({{i, i + n}, cls != 2});
      }
      prev_class = cls;
      i += n;
    }
    return out;
  }
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool prefix, std::shared_ptr<Regex> re) : add_prefix_space_(prefix), regex_(std::move(re)) {}
  Status PreTokenize(PreTokenizedString& pts) const override {
    RS_RETURN_IF_ERROR(pts.SplitEach([&](size_t, NormalizedString&& n) -> StatusOr<std::vector<NormalizedString>> {
      if (add_prefix_space_ && (n.get().empty() || n.get()[0] != ' ')) n.Prepend(" ");
      if (regex_) return n.Split(*regex_, SplitBehavior::kIsolated);
      std::vector<NormalizedString> v;
      v.push_back(std::move(n));
      return v;
    }));
    for (Split& s : pts.splits) {
      if (s.tokens) continue;
      const std::string& text = s.normalized.get();
      std::vector<CharChange> dest;
      dest.reserve(text.size());
      for (size_t i = 0; i < text.size();) {
        const size_t n = Utf8LeadLength(static_cast<unsigned char>(text[i]));
        for (size_t k = 0; k < n && i + k < text.size(); ++k) {
          dest.push_back({ByteToChar(static_cast<std::uint8_t>(text[i + k])), k > 0 ? 1 : 0});
        }
        i += n;
      }
      s.normalized.Transform(dest, 0);
    }
    return Status::Ok();
  }

 private:
  bool add_prefix_space_;
  std::shared_ptr<Regex> regex_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::shared_ptr<Pattern> p, SplitBehavior b) : pattern_(std::move(p)), behavior_(b) {}
  Status PreTokenize(PreTokenizedString& pts) const override {
    return pts.SplitEach([&](size_t, NormalizedString&& n) { return n.Split(*pattern_, behavior_); });
  }

 private:
  std::shared_ptr<Pattern> pattern_;
  SplitBehavior behavior_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string rep, PrependScheme scheme, bool split)
      : replacement_(std::move(rep)), scheme_(scheme), split_(split), space_(" "), rep_pattern_(replacement_) {}
  Status PreTokenize(PreTokenizedString& pts) const override {
    return pts.SplitEach([&](size_t, NormalizedString&& n) -> StatusOr<std::vector<NormalizedString>> {
      RS_RETURN_IF_ERROR(n.Replace(space_, replacement_));
      const bool starts = n.get().compare(0, replacement_.size(), replacement_) == 0;
      if (!starts &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && n.original_shift() == 0))) {
        n.Prepend(replacement_);
      }
      if (split_) return n.Split(rep_pattern_, SplitBehavior::kMergedWithNext);
      std::vector<NormalizedString> v;
      v.push_back(std::move(n));
      return v;
    });
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  StringPattern space_;
  StringPattern rep_pattern_;
};

// Splits with a character predicate and a behavior (Whitespace, Digits,
// Punctuation, BERT, CharDelimiterSplit).
class PredicatePreTokenizer final : public PreTokenizer {
 public:
  struct Step {
    std::shared_ptr<Pattern> pattern;
    SplitBehavior behavior;
  };
  explicit PredicatePreTokenizer(std::vector<Step> steps) : steps_(std::move(steps)) {}
  Status PreTokenize(PreTokenizedString& pts) const override {
    for (const Step& st : steps_) {
      RS_RETURN_IF_ERROR(
          pts.SplitEach([&](size_t, NormalizedString&& n) { return n.Split(*st.pattern, st.behavior); }));
    }
    return Status::Ok();
  }

 private:
  std::vector<Step> steps_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> p) : parts_(std::move(p)) {}
  Status PreTokenize(PreTokenizedString& pts) const override {
    for (const auto& p : parts_) RS_RETURN_IF_ERROR(p->PreTokenize(pts));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

bool IsBertPunctuation(char32_t c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126) ||
         IsPunctuation(c);
}

StatusOr<SplitBehavior> ParseBehavior(const json& j, const std::string& where, SplitBehavior def) {
  auto it = j.find("behavior");
  if (it == j.end() || it->is_null()) return def;
  const std::string b = it->is_string() ? it->get<std::string>() : "";
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return Bad(where, "unknown 'behavior' " + it->dump());
}

std::shared_ptr<Pattern> Pred(bool (*f)(char32_t)) { return std::make_shared<CharPredicatePattern>(f); }

}  // namespace

StatusOr<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const json& j) {
  const std::string type = TypeOf(j);
  const std::string where = "pre_tokenizer " + type;
  using P = std::unique_ptr<PreTokenizer>;
  if (type == "ByteLevel") {
    RS_ASSIGN_OR_RETURN(bool prefix, JsonReader(j, where).Bool("add_prefix_space", true));
    RS_ASSIGN_OR_RETURN(bool use_regex, JsonReader(j, where).Bool("use_regex", true));
    std::shared_ptr<Regex> re;
    if (use_regex) {
      RS_ASSIGN_OR_RETURN(re, Regex::Compile(kGpt2Regex));
    }
    return P(new ByteLevelPreTokenizer(prefix, std::move(re)));
  }
  if (type == "Split") {
    if (!j.contains("pattern")) return Bad(where, "missing 'pattern'");
    RS_ASSIGN_OR_RETURN(auto p, MakePattern(j["pattern"], where));
    RS_ASSIGN_OR_RETURN(SplitBehavior b, ParseBehavior(j, where, SplitBehavior::kIsolated));
    RS_ASSIGN_OR_RETURN(bool invert, JsonReader(j, where).Bool("invert", false));
    if (invert) p = std::make_shared<InvertPattern>(std::move(p));
    return P(new SplitPreTokenizer(std::move(p), b));
  }
  if (type == "Metaspace") {
    RS_ASSIGN_OR_RETURN(std::string rep, JsonReader(j, where).String("replacement", "\xE2\x96\x81"));
    if (CountCodePoints(rep) != 1) return Bad(where, "'replacement' must be one character");
    PrependScheme scheme = PrependScheme::kAlways;
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      const std::string s = j["prepend_scheme"].get<std::string>();
      if (s == "always")
        scheme = PrependScheme::kAlways;
      else if (s == "first")
        scheme = PrependScheme::kFirst;
      else if (s == "never")
        scheme = PrependScheme::kNever;
      else
        return Bad(where, "unknown 'prepend_scheme' '" + s + "'");
    } else {
      RS_ASSIGN_OR_RETURN(bool prefix, JsonReader(j, where).Bool("add_prefix_space", true));
      scheme = prefix ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    RS_ASSIGN_OR_RETURN(bool split, JsonReader(j, where).Bool("split", true));
    return P(new MetaspacePreTokenizer(rep, scheme, split));
  }
  if (type == "BertPreTokenizer") {
    return P(new PredicatePreTokenizer(
        {{Pred(IsWhitespace), SplitBehavior::kRemoved}, {Pred(IsBertPunctuation), SplitBehavior::kIsolated}}));
  }
  if (type == "Whitespace") {
    return P(new PredicatePreTokenizer(
        {{std::make_shared<InvertPattern>(std::make_shared<WordOrSymbolRuns>()), SplitBehavior::kRemoved}}));
  }
  if (type == "WhitespaceSplit") {
    return P(new PredicatePreTokenizer({{Pred(IsWhitespace), SplitBehavior::kRemoved}}));
  }
  if (type == "Digits") {
    RS_ASSIGN_OR_RETURN(bool individual, JsonReader(j, where).Bool("individual_digits", false));
    return P(new PredicatePreTokenizer(
        {{Pred(IsNumeric), individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous}}));
  }
  if (type == "Punctuation") {
    RS_ASSIGN_OR_RETURN(SplitBehavior b, ParseBehavior(j, where, SplitBehavior::kIsolated));
    return P(new PredicatePreTokenizer({{Pred(IsBertPunctuation), b}}));
  }
  if (type == "CharDelimiterSplit") {
    RS_ASSIGN_OR_RETURN(std::string d, JsonReader(j, where).String("delimiter"));
    if (CountCodePoints(d) != 1) return Bad(where, "'delimiter' must be one character");
    return P(new PredicatePreTokenizer({{std::make_shared<StringPattern>(d), SplitBehavior::kRemoved}}));
  }
  if (type == "Sequence") {
    RS_ASSIGN_OR_RETURN(const json* arr, JsonReader(j, where).Array("pretokenizers"));
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const json& sub : *arr) {
      RS_ASSIGN_OR_RETURN(auto p, MakePreTokenizer(sub));
      parts.push_back(std::move(p));
    }
    return P(new SequencePreTokenizer(std::move(parts)));
  }
  if (type.empty()) return Bad("pre_tokenizer", "object without a 'type'");
  return Unimplemented("pre_tokenizer: unsupported type '" + type + "'");
}

}  // namespace ropeserve::tok
