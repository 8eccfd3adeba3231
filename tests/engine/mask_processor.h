// A describable logits processor for tests: a fixed mask of allowed (or
// forbidden) ids, applied by Process one id at a time (the obvious
// reference) and stated by Describe as the edit a device applies.
#pragma once

#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "server/sampler/sampling.h"

namespace ropeserve::testing {

class MaskProcessor : public LogitsProcessor {
 public:
  // `ids` sorted.
  MaskProcessor(bool allow, std::vector<TokenId> ids)
      : ids_(std::make_shared<std::vector<TokenId>>(std::move(ids))), allow_(allow) {}
  // Even ids only, as an allow list of the even ids below `limit` or a
  // forbid list of the odd ones.
  static std::shared_ptr<MaskProcessor> EvenOnly(bool as_allow_list, TokenId limit) {
    std::vector<TokenId> ids;
    for (TokenId i = as_allow_list ? 0 : 1; i < limit; i += 2) ids.push_back(i);
    return std::make_shared<MaskProcessor>(as_allow_list, std::move(ids));
  }
  void Process(std::span<const TokenId>, std::span<float> logits) override {
    for (std::size_t i = 0; i < logits.size(); ++i) {
      const bool listed = std::binary_search(ids_->begin(), ids_->end(), static_cast<TokenId>(i));
      if (listed != allow_) logits[i] = -std::numeric_limits<float>::infinity();
    }
  }
  bool Describable() const override { return true; }
  void Describe(std::span<const TokenId>, LogitsEdit& edit) override {
    edit = LogitsEdit{};
    edit.masked = true;
    edit.allow_list = allow_;
    edit.ids = *ids_;
    edit.keep = ids_;
  }

 private:
  std::shared_ptr<std::vector<TokenId>> ids_;
  bool allow_;
};

}  // namespace ropeserve::testing
