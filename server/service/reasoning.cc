#include "server/service/reasoning.h"

#include <algorithm>

namespace ropeserve::service {

namespace {
constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

// The length of the longest suffix of `text` that is a proper prefix of `tag`.
std::size_t PartialTagAtEnd(std::string_view text, std::string_view tag) {
  for (std::size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}
}  // namespace

bool ReasoningSplitter::ForTemplate(std::string_view source) {
  return source.find(kOpen) != std::string_view::npos && source.find(kClose) != std::string_view::npos;
}

ReasoningSplitter::ReasoningSplitter(std::string_view prompt) : state_(State::kStart) {
  const std::size_t open = prompt.rfind(kOpen);
  const std::size_t close = prompt.rfind(kClose);
  if (open != std::string_view::npos && (close == std::string_view::npos || close < open)) state_ = State::kReasoning;
}

ReasoningSplitter::Split ReasoningSplitter::Push(std::string_view text) {
  pending_.append(text);
  Split out;
  if (state_ == State::kStart) {
    // Does the output open a reasoning block? Wait until it is known.
    if (pending_.size() < kOpen.size() && kOpen.substr(0, pending_.size()) == pending_) return out;
    if (pending_.compare(0, kOpen.size(), kOpen) == 0) {
      pending_.erase(0, kOpen.size());
      state_ = State::kReasoning;
    } else {
      state_ = State::kContent;
    }
  }
  if (state_ == State::kReasoning) {
    const std::size_t end = pending_.find(kClose);
    if (end == std::string::npos) {
      const std::size_t keep = PartialTagAtEnd(pending_, kClose);
      out.reasoning = pending_.substr(0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      return out;
    }
    out.reasoning = pending_.substr(0, end);
    pending_.erase(0, end + kClose.size());
    state_ = State::kContent;
  }
  out.content += pending_;
  pending_.clear();
  return out;
}

ReasoningSplitter::Split ReasoningSplitter::Finish() {
  Split out;
  if (state_ == State::kReasoning) {
    out.reasoning = std::move(pending_);
  } else {
    out.content = std::move(pending_);  // kStart: a prefix of "<think>" that never completed
  }
  pending_.clear();
  state_ = State::kContent;
  return out;
}

ReasoningSplitter::Split ReasoningSplitter::All(std::string_view text) {
  Split a = Push(text);
  Split b = Finish();
  a.reasoning += b.reasoning;
  a.content += b.content;
  return a;
}

}  // namespace ropeserve::service
