#include "server/service/document_splitter.h"

#include <algorithm>

namespace ropeserve::service {

namespace {

// A boundary is judged from at most this many bytes of whitespace on each
// side: a megabyte of spaces costs no more than a short gap.
constexpr std::size_t kScan = 64;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

// The byte length of a closing quote or bracket ending text[0, end), or 0.
std::size_t ClosingLength(std::string_view text, std::size_t end) {
  if (end >= 1 && (text[end - 1] == '"' || text[end - 1] == '\'' || text[end - 1] == ')' || text[end - 1] == ']'))
    return 1;
  for (std::string_view close : {"\u201D", "\u2019", "\u00BB", "\u300D", "\u300F", "\uFF09"})
    if (end >= close.size() && text.substr(end - close.size(), close.size()) == close) return close.size();
  return 0;
}

// Whether text[0, end) ends with a sentence end, looking through closing
// quotes and brackets; `needs_space` is set for the ASCII marks (3.14 and
// example.com are not sentence ends; a CJK full stop needs no space).
bool EndsSentence(std::string_view text, std::size_t end, bool* needs_space) {
  for (int i = 0; i < 3; ++i) {
    const std::size_t n = ClosingLength(text, end);
    if (n == 0) break;
    end -= n;
  }
  if (end >= 1 && (text[end - 1] == '.' || text[end - 1] == '!' || text[end - 1] == '?')) {
    *needs_space = true;
    return true;
  }
  for (std::string_view stop : {"\u3002", "\uFF01", "\uFF1F"})
    if (end >= stop.size() && text.substr(end - stop.size(), stop.size()) == stop) {
      *needs_space = false;
      return true;
    }
  return false;
}

// The best cut before a token in [from, to] (to < tokens.size()): the
// highest rank; ties go to the latest (`latest`) or the earliest.
std::pair<std::size_t, int> BestCut(std::string_view text, const std::vector<TokenSpan>& tokens, std::size_t from,
                                    std::size_t to, bool latest) {
  std::size_t best = from;
  int rank = -1;
  for (std::size_t t = from; t <= to; ++t) {
    const int r = BoundaryRank(text, tokens[t].begin);
    if (r > rank || (latest && r == rank)) {
      rank = r;
      best = t;
    }
  }
  return {best, rank};
}

}  // namespace

int BoundaryRank(std::string_view text, std::size_t pos) {
  if (pos == 0 || pos >= text.size()) return 4;
  std::size_t a = pos, b = pos;
  while (a > 0 && pos - a < kScan && IsSpace(text[a - 1])) --a;
  while (b < text.size() && b - pos < kScan && IsSpace(text[b])) ++b;
  const auto newlines =
      std::count(text.begin() + static_cast<std::ptrdiff_t>(a), text.begin() + static_cast<std::ptrdiff_t>(b), '\n');
  if (newlines >= 2) return 4;
  bool needs_space = false;
  if (EndsSentence(text, a, &needs_space) && (!needs_space || b > a)) return 3;
  if (newlines == 1) return 2;
  return b > a ? 1 : 0;
}

std::vector<TextChunk> SplitDocument(std::string_view text, const std::vector<TokenSpan>& tokens,
                                     const SplitOptions& options) {
  const std::size_t n = tokens.size();
  const std::size_t max = std::max<std::size_t>(2, options.max_tokens);
  const std::size_t overlap = std::min(options.overlap_tokens, max / 4);
  std::vector<TextChunk> out;
  auto emit = [&](std::size_t first, std::size_t last) {
    std::size_t begin = std::min(tokens[first].begin, text.size());
    std::size_t end = std::min(std::max(tokens[last - 1].end, begin), text.size());
    while (begin < end && IsSpace(text[begin])) ++begin;
    while (end > begin && IsSpace(text[end - 1])) --end;
    if (begin < end) out.push_back({begin, end, first, last});
  };
  std::size_t s = 0;
  while (s < n) {
    if (n - s <= max) {
      emit(s, n);
      break;
    }
    // Cut before token `cut`, in the second half of the budget.
    auto [cut, rank] = BestCut(text, tokens, s + max / 2, s + max, /*latest=*/true);
    if (rank <= 0) cut = s + max;
    emit(s, cut);
    std::size_t next = cut;
    if (overlap > 0) {
      const std::size_t from = std::max(s + 1, cut - overlap);
      auto [t, r] = BestCut(text, tokens, from, cut - 1, /*latest=*/false);
      if (r >= 1) next = t;
    }
    s = next;
  }
  return out;
}

}  // namespace ropeserve::service
