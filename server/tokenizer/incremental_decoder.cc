// IncrementalDecoder (tokenizer.h): ids produced one at a time into text
// that never splits a character or a byte-fallback sequence.
#include "server/tokenizer/tokenizer.h"

namespace ropeserve::tok {

IncrementalDecoder::IncrementalDecoder(std::shared_ptr<const Tokenizer> t, bool skip_special)
    : tok_(std::move(t)), skip_special_(skip_special) {}

bool Tokenizer::IsByteFallbackToken(TokenId id) const {
  const std::string* t = IdToToken(id);
  return t != nullptr && t->size() == 6 && t->compare(0, 3, "<0x") == 0 && (*t)[5] == '>';
}

StatusOr<std::string> IncrementalDecoder::DecodeFrom(size_t start, size_t end) const {
  return tok_->Decode(
      std::vector<TokenId>(ids_.begin() + static_cast<long>(start), ids_.begin() + static_cast<long>(end)),
      skip_special_);
}

StatusOr<std::string> IncrementalDecoder::Push(TokenId id) {
  // A model may sample an id the tokenizer does not have (embeddings padded
  // to a multiple of 64 or 128 rows): it has no text. Hugging Face's decode
  // skips such ids, and so do the serving engines; a generation must not
  // fail on one.
  if (tok_->IdToToken(id) == nullptr) return std::string();
  ids_.push_back(id);
  // While the ids end in byte-fallback pieces, the group is incomplete: a
  // later byte can turn all of it (even bytes that decode on their own)
  // into U+FFFD. Wait for the next ordinary token or Finish. A special
  // token that is skipped does not end the group: the bytes on both sides
  // of it meet in the decode.
  if (skip_special_ && tok_->IsSpecial(id)) {
    if (in_byte_group_) return std::string();
  } else {
    in_byte_group_ = tok_->IsByteFallbackToken(id);
    if (in_byte_group_) return std::string();
  }
  return Emit(false);
}

StatusOr<std::string> IncrementalDecoder::Emit(bool final) {
  RS_ASSIGN_OR_RETURN(std::string cur, DecodeFrom(window_, ids_.size()));
  size_t end = cur.size();
  if (!final) {
    // Hold back a trailing run of U+FFFD: it may be an incomplete character
    // (byte-level) that the next token completes.
    while (end >= 3 && cur.compare(end - 3, 3, "\xEF\xBF\xBD") == 0) end -= 3;
    if (size_t hold = tok_->DecodeHoldbackBytes(); hold > 0) {
      end = end > hold ? end - hold : 0;
      while (end > 0 && (static_cast<unsigned char>(cur[end]) & 0xC0) == 0x80) --end;
    }
  }
  if (cur.compare(0, base_emitted_, base_, 0, base_emitted_) != 0) {
    return Internal("incremental decoding diverged from the full decode");
  }
  std::string piece;
  if (end > base_emitted_) piece = cur.substr(base_emitted_, end - base_emitted_);
  base_ = std::move(cur);
  base_emitted_ = std::max(base_emitted_, end);
  read_ = ids_.size();
  // Slide the window once it is long, keeping a few ids of context before
  // the read point (the first ids of a window decode differently, and that
  // must stay out of the part we compare).
  // The window must also keep a token that is decoded (not a skipped
  // special) before the read point: start-of-text effects must fall on
  // text already emitted, never on the next token.
  constexpr size_t kWindow = 24, kContext = 6;
  if (!final && end == base_.size() && read_ - window_ > kWindow) {
    size_t visible = read_;
    while (visible > window_ && skip_special_ && tok_->IsSpecial(ids_[visible - 1])) --visible;
    if (visible > window_) {
      window_ = std::min(read_ - kContext, visible - 1);
      RS_ASSIGN_OR_RETURN(base_, DecodeFrom(window_, read_));
      base_emitted_ = base_.size();
    }
  }
  return piece;
}

StatusOr<std::string> IncrementalDecoder::Finish() { return Emit(true); }

}  // namespace ropeserve::tok
