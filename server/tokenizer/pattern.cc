#include "server/tokenizer/pattern.h"

#include <oniguruma.h>

#include <mutex>

#include "server/tokenizer/unicode.h"

namespace ropeserve::tok {

namespace {
std::vector<PatternMatch> FromMatches(std::string_view s, const std::vector<Offsets>& ms) {
  std::vector<PatternMatch> out;
  if (s.empty()) {
    out.push_back({{0, 0}, false});
    return out;
  }
  size_t prev = 0;
  for (const Offsets& m : ms) {
    if (prev != m.start) out.push_back({{prev, m.start}, false});
    out.push_back({m, true});
    prev = m.end;
  }
  if (prev != s.size()) out.push_back({{prev, s.size()}, false});
  return out;
}
}  // namespace

StatusOr<std::vector<PatternMatch>> StringPattern::FindMatches(std::string_view s) const {
  std::vector<Offsets> ms;
  if (!literal_.empty()) {
    size_t pos = 0;
    while ((pos = s.find(literal_, pos)) != std::string_view::npos) {
      ms.push_back({pos, pos + literal_.size()});
      pos += literal_.size();
    }
  }
  return FromMatches(s, ms);
}

StatusOr<std::vector<PatternMatch>> CharPredicatePattern::FindMatches(std::string_view s) const {
  std::vector<Offsets> ms;
  for (size_t i = 0; i < s.size();) {
    size_t n;
    const char32_t c = DecodeUtf8(s, i, &n);
    if (pred_(c)) ms.push_back({i, i + n});
    i += n;
  }
  return FromMatches(s, ms);
}

namespace {
std::once_flag g_onig_init;
}

StatusOr<std::shared_ptr<Regex>> Regex::Compile(const std::string& pattern) {
  std::call_once(g_onig_init, [] {
    OnigEncoding encs[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encs, 1);
  });
  std::shared_ptr<Regex> re(new Regex());
  re->source_ = pattern;
  OnigErrorInfo einfo;
  OnigRegex reg = nullptr;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int r =
      onig_new(&reg, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &einfo);
  if (r != ONIG_NORMAL) {
    OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(buf, r, &einfo);
    return InvalidArgument("invalid regular expression '" + pattern + "': " + reinterpret_cast<char*>(buf));
  }
  re->regex_ = reg;
  return re;
}

Regex::~Regex() {
  if (regex_ != nullptr) onig_free(static_cast<OnigRegex>(regex_));
}

Status Regex::ForEachMatch(std::string_view s, const std::function<void(size_t, size_t)>& on_match) const {
  auto* reg = static_cast<OnigRegex>(regex_);
  OnigRegion* region = onig_region_new();
  const auto* begin = reinterpret_cast<const OnigUChar*>(s.data());
  const auto* end = begin + s.size();
  size_t pos = 0;
  long last_end = -1;
  Status status;
  while (pos <= s.size()) {
    const int r = onig_search(reg, begin, end, begin + pos, end, region, ONIG_OPTION_NONE);
    if (r == ONIG_MISMATCH) break;
    if (r < 0) {
      OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
      onig_error_code_to_str(buf, r);
      status = InvalidArgument("regular expression '" + source_ + "' failed: " + reinterpret_cast<char*>(buf));
      break;
    }
    const size_t ms = static_cast<size_t>(region->beg[0]);
    const size_t me = static_cast<size_t>(region->end[0]);
    if (ms == me) {
      // Empty match: report it unless it touches the previous match, then
      // step over one character.
      if (static_cast<long>(ms) != last_end) on_match(ms, me);
      if (ms >= s.size()) break;
      pos = ms + Utf8LeadLength(static_cast<unsigned char>(s[ms]));
      continue;
    }
    on_match(ms, me);
    last_end = static_cast<long>(me);
    pos = me;
  }
  onig_region_free(region, 1);
  return status;
}

StatusOr<std::vector<PatternMatch>> Regex::FindMatches(std::string_view s) const {
  std::vector<Offsets> ms;
  if (!s.empty()) {
    RS_RETURN_IF_ERROR(ForEachMatch(s, [&](size_t a, size_t b) {
      if (a != b) ms.push_back({a, b});
    }));
  }
  return FromMatches(s, ms);
}

}  // namespace ropeserve::tok
