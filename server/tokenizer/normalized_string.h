// A string being normalized, with the alignment of every normalized byte to
// a range of the original string. Offsets of tokens are reported in the
// original text, so every transformation (normalizers, pre-tokenizers)
// must go through Transform(), which keeps the alignments in step with the
// same rules as Hugging Face's NormalizedString:
//   - every byte of a character starts aligned to that whole character;
//   - a replacing character (change 0) takes the alignment of the character
//     it replaces, an inserted one (change +1) that of the previous
//     character, and change -N removes the N characters that follow.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/common/status.h"

namespace ropeserve::tok {

class Pattern;

struct Offsets {
  size_t start = 0;
  size_t end = 0;
  bool operator==(const Offsets&) const = default;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct CharChange {
  char32_t c;
  int change;  // 0 replace, +1 insert, -N replace and remove N following
};

class NormalizedString {
 public:
  NormalizedString() = default;
  explicit NormalizedString(std::string_view original);

  const std::string& get() const { return normalized_; }
  const std::string& original() const { return original_; }
  size_t original_shift() const { return original_shift_; }
  bool empty() const { return normalized_.empty(); }
  size_t size() const { return normalized_.size(); }

  // Original byte range (in the whole input) covered by normalized bytes
  // [start, end) of this string.
  Offsets ToOriginal(Offsets normalized) const;

  // Replaces normalized bytes [start, end) by `dest`; `initial_offset`
  // characters at the start of the range are removed.
  void TransformRange(size_t start, size_t end, const std::vector<CharChange>& dest, size_t initial_offset);
  void Transform(const std::vector<CharChange>& dest, size_t initial_offset) {
    TransformRange(0, normalized_.size(), dest, initial_offset);
  }

  void NormalizeUnicode(int form);  // tok::NormalForm
  void Lowercase();
  void Prepend(std::string_view s);
  void Append(std::string_view s);
  void Strip(bool left, bool right);
  // Keeps the characters for which `keep` is true.
  void Filter(const std::function<bool(char32_t)>& keep);
  // Maps each character to one or more characters (the first replaces it).
  void MapChars(const std::function<std::u32string(char32_t)>& map);
  Status Replace(const Pattern& pattern, std::string_view content);

  // Sub-string over normalized bytes [start, end) (on character boundaries).
  NormalizedString Slice(size_t start, size_t end) const;
  StatusOr<std::vector<NormalizedString>> Split(const Pattern& pattern, SplitBehavior behavior) const;

 private:
  std::string original_;
  std::string normalized_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> align_;  // per normalized byte
  size_t original_shift_ = 0;
};

}  // namespace ropeserve::tok
