#include "server/sampler/logits_processors.h"

#include <algorithm>
#include <limits>

namespace ropeserve {

LogitBias::LogitBias(std::vector<std::pair<std::int64_t, float>> bias) : bias_(std::move(bias)) {
  std::vector<std::int64_t> ids;
  for (const auto& [id, b] : bias_) {
    ids.push_back(id);
    // An id outside TokenId's range matches no logit (Process skips it too).
    if (id < 0 || id > std::numeric_limits<TokenId>::max()) distinct_ = false;
  }
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) distinct_ = false;
}

void LogitBias::Process(std::span<const TokenId>, std::span<float> logits) {
  for (auto [id, b] : bias_)
    if (id >= 0 && static_cast<std::size_t>(id) < logits.size()) logits[static_cast<std::size_t>(id)] += b;
}

void LogitBias::Describe(std::span<const TokenId>, LogitsEdit& edit) {
  edit = LogitsEdit{};
  for (auto [id, b] : bias_) edit.bias.emplace_back(static_cast<TokenId>(id), b);
}

AllowedTokens::AllowedTokens(std::vector<TokenId> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  ids_ = std::make_shared<const std::vector<TokenId>>(std::move(ids));
}

void AllowedTokens::Process(std::span<const TokenId>, std::span<float> logits) {
  ApplyTokenMask(logits, /*allow_list=*/true, *ids_);
}

void AllowedTokens::Describe(std::span<const TokenId>, LogitsEdit& edit) {
  edit = LogitsEdit{};
  edit.masked = true;
  edit.allow_list = true;
  edit.ids = *ids_;
  edit.keep = ids_;
}

BadWords::BadWords(std::vector<std::vector<TokenId>> sequences) : sequences_(std::move(sequences)) {}

std::vector<TokenId> BadWords::Banned(std::span<const TokenId> generated) const {
  std::vector<TokenId> out;
  for (const auto& seq : sequences_) {
    if (seq.empty()) continue;
    const std::size_t prefix = seq.size() - 1;
    if (prefix > generated.size()) continue;
    if (std::equal(seq.begin(), seq.end() - 1, generated.end() - static_cast<std::ptrdiff_t>(prefix)))
      out.push_back(seq.back());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void BadWords::Process(std::span<const TokenId> generated, std::span<float> logits) {
  ApplyTokenMask(logits, /*allow_list=*/false, Banned(generated));
}

void BadWords::Describe(std::span<const TokenId> generated, LogitsEdit& edit) {
  edit = LogitsEdit{};
  auto banned = std::make_shared<const std::vector<TokenId>>(Banned(generated));
  if (banned->empty()) return;
  edit.masked = true;
  edit.allow_list = false;
  edit.ids = *banned;
  edit.keep = std::move(banned);
}

ProcessorChain::ProcessorChain(std::vector<std::shared_ptr<LogitsProcessor>> parts) : parts_(std::move(parts)) {
  int biases = 0, others = 0;
  describable_ = true;
  for (const auto& p : parts_) {
    describable_ = describable_ && p != nullptr && p->Describable();
    (dynamic_cast<const LogitBias*>(p.get()) != nullptr ? biases : others) += 1;
  }
  describable_ = describable_ && biases <= 1 && others <= 1;
}

void ProcessorChain::Process(std::span<const TokenId> generated, std::span<float> logits) {
  for (auto& p : parts_) p->Process(generated, logits);
}

void ProcessorChain::Describe(std::span<const TokenId> generated, LogitsEdit& edit) {
  edit = LogitsEdit{};
  for (auto& p : parts_) {
    LogitsEdit part;
    p->Describe(generated, part);
    edit.bias.insert(edit.bias.end(), part.bias.begin(), part.bias.end());
    if (!part.masked) continue;
    edit.masked = true;
    edit.allow_list = part.allow_list;
    edit.ids = part.ids;
    edit.keep = std::move(part.keep);
  }
}

}  // namespace ropeserve
