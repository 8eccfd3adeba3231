#include "server/tokenizer/normalized_string.h"

#include <algorithm>

#include "server/tokenizer/pattern.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::tok {

NormalizedString::NormalizedString(std::string_view original) : original_(original), normalized_(original) {
  align_.resize(original.size());
  size_t i = 0;
  while (i < original.size()) {
    const size_t n = Utf8LeadLength(static_cast<unsigned char>(original[i]));
    for (size_t k = 0; k < n && i + k < original.size(); ++k) {
      align_[i + k] = {static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + n)};
    }
    i += n;
  }
}

Offsets NormalizedString::ToOriginal(Offsets n) const {
  if (n.start >= n.end || n.end > align_.size()) {
    // Empty range: anchor it where it sits in the original.
    const size_t at = n.start < align_.size() ? align_[n.start].first
                      : align_.empty()        ? original_.size()
                                              : align_.back().second;
    return {original_shift_ + at, original_shift_ + at};
  }
  return {original_shift_ + align_[n.start].first, original_shift_ + align_[n.end - 1].second};
}

void NormalizedString::TransformRange(size_t start, size_t end, const std::vector<CharChange>& dest,
                                      size_t initial_offset) {
  // Characters of the range being replaced, as byte lengths.
  std::vector<size_t> old_lens;
  for (size_t i = start; i < end;) {
    const size_t n = Utf8LeadLength(static_cast<unsigned char>(normalized_[i]));
    old_lens.push_back(n);
    i += n;
  }
  size_t next_old = 0;
  size_t offset = start;
  for (; next_old < initial_offset && next_old < old_lens.size(); ++next_old) {
    offset += old_lens[next_old];
  }
  std::string out;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out_align;
  out.reserve(end - start);
  out_align.reserve(end - start);
  for (const CharChange& cc : dest) {
    std::pair<std::uint32_t, std::uint32_t> a;
    if (cc.change > 0) {
      a = offset >= 1 ? align_[offset - 1] : std::pair<std::uint32_t, std::uint32_t>{0, 0};
    } else {
      a = offset < align_.size() ? align_[offset]
          : align_.empty()       ? std::pair<std::uint32_t, std::uint32_t>{0, 0}
                                 : align_.back();
      if (next_old < old_lens.size()) offset += old_lens[next_old++];
      for (int r = 0; r < -cc.change && next_old < old_lens.size(); ++r) {
        offset += old_lens[next_old++];
      }
    }
    const size_t before = out.size();
    AppendUtf8(&out, cc.c);
    out_align.insert(out_align.end(), out.size() - before, a);
  }
  normalized_.replace(start, end - start, out);
  align_.erase(align_.begin() + start, align_.begin() + end);
  align_.insert(align_.begin() + start, out_align.begin(), out_align.end());
}

namespace {
std::vector<char32_t> Chars(std::string_view s) {
  std::vector<char32_t> cs;
  cs.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n;
    cs.push_back(DecodeUtf8(s, i, &n));
    i += n;
  }
  return cs;
}
}  // namespace

namespace {
constexpr size_t kMaxChunkChars = 64;
}  // namespace

void NormalizedString::NormalizeUnicode(int form_int) {
  const auto form = static_cast<NormalForm>(form_int);
  const std::string whole = Normalize(normalized_, form);
  if (whole == normalized_) return;
  // Split the string into the shortest chunks that normalize independently
  // (a chunk grows while its next character interacts with it: composition
  // or canonical reordering), so that alignments stay per character.
  std::vector<CharChange> dest;
  const std::vector<char32_t> cs = Chars(normalized_);
  std::string chunk, chunk_norm;
  size_t chunk_chars = 0;
  auto flush = [&] {
    if (chunk_chars == 0) return;
    const std::vector<char32_t> outs = Chars(chunk_norm);
    const size_t n = chunk_chars, m = outs.size();
    for (size_t k = 0; k < m; ++k) {
      int change = 0;
      if (k >= n) change = 1;
      if (k == 0 && m < n) change = -static_cast<int>(n - m);
      dest.push_back({outs[k], change});
    }
    if (m == 0) {
      // Everything removed: nothing to emit; the removal is folded into the
      // previous character (or the initial offset when at the start).
      if (!dest.empty()) {
        dest.back().change -= static_cast<int>(n);
      }
    }
    chunk.clear();
    chunk_norm.clear();
    chunk_chars = 0;
  };
  for (size_t idx = 0; idx < cs.size(); ++idx) {
    const char32_t c = cs[idx];
    // ASCII never composes with what precedes it and is never changed, so an
    // ASCII character followed by ASCII is a chunk of its own (fast path).
    if (c < 0x80 && (idx + 1 == cs.size() || cs[idx + 1] < 0x80)) {
      flush();
      dest.push_back({c, 0});
      continue;
    }
    const std::string one = ToUtf8(c);
    const std::string one_norm = Normalize(one, form);
    // Chunks are capped so that pathological input (a million combining
    // marks) stays linear; a real character never has that many marks.
    if (chunk_chars > 0 && chunk_chars < kMaxChunkChars) {
      const std::string joined = Normalize(chunk + one, form);
      if (joined != chunk_norm + one_norm) {
        chunk += one;
        chunk_norm = joined;
        ++chunk_chars;
        continue;
      }
    }
    flush();
    chunk = one;
    chunk_norm = one_norm;
    chunk_chars = 1;
  }
  flush();
  Transform(dest, 0);
}

void NormalizedString::Lowercase() {
  std::vector<CharChange> dest;
  bool changed = false;
  for (size_t i = 0; i < normalized_.size();) {
    size_t n;
    const char32_t c = DecodeUtf8(normalized_, i, &n);
    i += n;
    const std::u32string low = ToLowercase(c);
    changed |= low.size() != 1 || low[0] != c;
    for (size_t k = 0; k < low.size(); ++k) dest.push_back({low[k], k > 0 ? 1 : 0});
  }
  if (changed) Transform(dest, 0);
}

void NormalizedString::MapChars(const std::function<std::u32string(char32_t)>& map) {
  std::vector<CharChange> dest;
  for (size_t i = 0; i < normalized_.size();) {
    size_t n;
    const char32_t c = DecodeUtf8(normalized_, i, &n);
    i += n;
    const std::u32string m = map(c);
    for (size_t k = 0; k < m.size(); ++k) dest.push_back({m[k], k > 0 ? 1 : 0});
  }
  Transform(dest, 0);
}

void NormalizedString::Prepend(std::string_view s) {
  if (normalized_.empty() || s.empty()) return;
  size_t n;
  const char32_t next = DecodeUtf8(normalized_, 0, &n);
  std::vector<CharChange> dest;
  const std::vector<char32_t> cs = Chars(s);
  for (size_t i = 0; i < cs.size(); ++i) dest.push_back({cs[i], i == 0 ? 0 : 1});
  dest.push_back({next, 1});
  TransformRange(0, n, dest, 0);
}

void NormalizedString::Append(std::string_view s) {
  if (normalized_.empty() || s.empty()) return;
  size_t b = normalized_.size() - 1;
  while (b > 0 && (static_cast<unsigned char>(normalized_[b]) & 0xC0) == 0x80) --b;
  size_t n;
  const char32_t prev = DecodeUtf8(normalized_, b, &n);
  std::vector<CharChange> dest{{prev, 0}};
  for (char32_t c : Chars(s)) dest.push_back({c, 1});
  TransformRange(b, normalized_.size(), dest, 0);
}

void NormalizedString::Strip(bool left, bool right) {
  const std::vector<char32_t> cs = Chars(normalized_);
  size_t lead = 0, trail = 0;
  if (left)
    while (lead < cs.size() && IsWhitespace(cs[lead])) ++lead;
  if (right)
    while (trail < cs.size() - lead && IsWhitespace(cs[cs.size() - 1 - trail])) ++trail;
  if (lead == 0 && trail == 0) return;
  std::vector<CharChange> dest;
  for (size_t i = lead; i + trail < cs.size(); ++i) {
    dest.push_back({cs[i], i + trail + 1 == cs.size() ? -static_cast<int>(trail) : 0});
  }
  Transform(dest, lead);
}

void NormalizedString::Filter(const std::function<bool(char32_t)>& keep) {
  const std::vector<char32_t> cs = Chars(normalized_);
  std::vector<CharChange> rev;
  int removed = 0;
  for (size_t k = cs.size(); k-- > 0;) {
    if (keep(cs[k])) {
      rev.push_back({cs[k], -removed});
      removed = 0;
    } else {
      ++removed;
    }
  }
  if (rev.size() == cs.size()) return;
  std::reverse(rev.begin(), rev.end());
  Transform(rev, static_cast<size_t>(removed));
}

Status NormalizedString::Replace(const Pattern& pattern, std::string_view content) {
  RS_ASSIGN_OR_RETURN(auto matches, pattern.FindMatches(normalized_));
  // One pass (a splice per match would be quadratic on long inputs). As in
  // the reference, the replacement's characters are inserted after the
  // removed match and so share the alignment of its last byte.
  std::string out;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out_align;
  out.reserve(normalized_.size());
  out_align.reserve(normalized_.size());
  bool changed = false;
  for (const auto& m : matches) {
    const size_t a = m.offsets.start, b = m.offsets.end;
    if (!m.is_match) {
      out.append(normalized_, a, b - a);
      out_align.insert(out_align.end(), align_.begin() + a, align_.begin() + b);
      continue;
    }
    changed = true;
    const std::pair<std::uint32_t, std::uint32_t> al =
        b >= 1 ? align_[b - 1] : std::pair<std::uint32_t, std::uint32_t>{0, 0};
    out.append(content);
    out_align.insert(out_align.end(), content.size(), al);
  }
  if (changed) {
    normalized_ = std::move(out);
    align_ = std::move(out_align);
  }
  return Status::Ok();
}

NormalizedString NormalizedString::Slice(size_t start, size_t end) const {
  NormalizedString out;
  out.normalized_ = normalized_.substr(start, end - start);
  size_t o_start, o_end;
  if (start < end) {
    o_start = align_[start].first;
    o_end = align_[end - 1].second;
  } else {
    o_start = o_end = start < align_.size() ? align_[start].first : align_.empty() ? 0 : align_.back().second;
  }
  out.original_ = original_.substr(o_start, o_end - o_start);
  out.align_.reserve(end - start);
  for (size_t i = start; i < end; ++i) {
    out.align_.push_back({static_cast<std::uint32_t>(align_[i].first - o_start),
                          static_cast<std::uint32_t>(align_[i].second - o_start)});
  }
  out.original_shift_ = original_shift_ + o_start;
  return out;
}

StatusOr<std::vector<NormalizedString>> NormalizedString::Split(const Pattern& pattern, SplitBehavior behavior) const {
  RS_ASSIGN_OR_RETURN(auto matches, pattern.FindMatches(normalized_));
  struct Piece {
    Offsets o;
    bool remove;
  };
  std::vector<Piece> pieces;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& m : matches) pieces.push_back({m.offsets, false});
      break;
    case SplitBehavior::kRemoved:
      for (const auto& m : matches) pieces.push_back({m.offsets, m.is_match});
      break;
    case SplitBehavior::kContiguous: {
      bool prev = false;
      for (const auto& m : matches) {
        if (m.is_match == prev && !pieces.empty())
          pieces.back().o.end = m.offsets.end;
        else
          pieces.push_back({m.offsets, false});
        prev = m.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev = false;
      for (const auto& m : matches) {
        if (m.is_match && !prev && !pieces.empty())
          pieces.back().o.end = m.offsets.end;
        else
          pieces.push_back({m.offsets, false});
        prev = m.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev = false;
      for (size_t k = matches.size(); k-- > 0;) {
        const auto& m = matches[k];
        if (m.is_match && !prev && !pieces.empty())
          pieces.back().o.start = m.offsets.start;
        else
          pieces.push_back({m.offsets, false});
        prev = m.is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
  }
  std::vector<NormalizedString> out;
  out.reserve(pieces.size());
  for (const Piece& p : pieces) {
    if (!p.remove) out.push_back(Slice(p.o.start, p.o.end));
  }
  return out;
}

}  // namespace ropeserve::tok
