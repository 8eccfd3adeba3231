#include "server/engine/speculative.h"

#include <algorithm>
#include <string>

namespace ropeserve {

Status SpeculativeConfig::Validate() const {
  if (num_tokens < 0 || num_tokens > kMaxSpeculativeTokens)
    return InvalidArgument("the number of speculative tokens must be in [0, " + std::to_string(kMaxSpeculativeTokens) +
                           "]");
  if (min_ngram < 1) return InvalidArgument("the prompt lookup's minimum n-gram must be at least 1");
  if (max_ngram < min_ngram)
    return InvalidArgument("the prompt lookup's maximum n-gram must be at least its minimum (" +
                           std::to_string(min_ngram) + ")");
  if (max_ngram > 64) return InvalidArgument("the prompt lookup's maximum n-gram must be at most 64");
  if (disable_by_batch_size < 0) return InvalidArgument("the batch size that disables speculation must be >= 0");
  return Status::Ok();
}

std::vector<TokenId> ProposeNgram(std::span<const TokenId> tokens, const SpeculativeConfig& config,
                                  std::int64_t max_tokens) {
  const auto total = static_cast<std::int64_t>(tokens.size());
  max_tokens = std::min<std::int64_t>(max_tokens, config.num_tokens);
  if (max_tokens <= 0) return {};
  // Longest first: the first n with a match is the longest; scanning starts
  // in order makes it the earliest occurrence. An occurrence must end
  // before the suffix does (start + n <= total - 1).
  for (std::int64_t n = std::min<std::int64_t>(config.max_ngram, total - 1); n >= config.min_ngram; --n) {
    const auto suffix = tokens.last(static_cast<std::size_t>(n));
    for (std::int64_t start = 0; start + n < total; ++start) {
      if (tokens[static_cast<std::size_t>(start)] != suffix[0]) continue;
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const std::int64_t from = start + n;
      const std::int64_t k = std::min(max_tokens, total - from);
      return {tokens.begin() + from, tokens.begin() + from + k};
    }
  }
  return {};
}

}  // namespace ropeserve
