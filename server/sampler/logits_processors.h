// The engine's own logits processors: OpenAI's logit_bias, vLLM's
// allowed_token_ids and bad_words, and a chain of processors applied in
// order (logit_bias, then a mask: the allowed ids, the bad words' or a
// grammar's). Each states its effect as a LogitsEdit, so their rows are
// processed where the logits lie. Torch-free.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "server/sampler/sampling.h"

namespace ropeserve {

// Fixed amounts added to some tokens' logits. Stateless, so the choices of
// one request share it. Describable when its ids are distinct (a client may
// name one id twice, as "7" and "07": then the host adds both, in order).
class LogitBias final : public LogitsProcessor {
 public:
  explicit LogitBias(std::vector<std::pair<std::int64_t, float>> bias);
  void Process(std::span<const TokenId> generated, std::span<float> logits) override;
  bool Describable() const override { return distinct_; }
  void Describe(std::span<const TokenId> generated, LogitsEdit& edit) override;

 private:
  std::vector<std::pair<std::int64_t, float>> bias_;
  bool distinct_ = true;
};

// Only these ids may be chosen (vLLM's allowed_token_ids): every other
// logit is -inf. Stateless.
class AllowedTokens final : public LogitsProcessor {
 public:
  explicit AllowedTokens(std::vector<TokenId> ids);  // any order; duplicates are fine
  void Process(std::span<const TokenId> generated, std::span<float> logits) override;
  bool Describable() const override { return true; }
  void Describe(std::span<const TokenId> generated, LogitsEdit& edit) override;

 private:
  std::shared_ptr<const std::vector<TokenId>> ids_;  // sorted, distinct
};

// Token sequences that are never generated (vLLM's bad_words, as token
// sequences): a one-token sequence's token is always -inf; a longer one's
// last token is -inf where the generated tokens end with the rest of it.
// Only generated tokens count, not the prompt's (as vLLM). Stateless: the
// generated tokens say everything.
class BadWords final : public LogitsProcessor {
 public:
  explicit BadWords(std::vector<std::vector<TokenId>> sequences);  // each non-empty
  void Process(std::span<const TokenId> generated, std::span<float> logits) override;
  bool Describable() const override { return true; }
  void Describe(std::span<const TokenId> generated, LogitsEdit& edit) override;
  // The ids banned after `generated`: sorted, distinct.
  std::vector<TokenId> Banned(std::span<const TokenId> generated) const;

 private:
  std::vector<std::vector<TokenId>> sequences_;
};

// Several processors in order. Describable when every part is, at most one
// is a LogitBias and at most one is something else (a mask: what the
// service builds, unless a request asks for both allowed ids and bad
// words): a bias and a mask commute (the mask's -inf absorbs any finite
// bias), so the edit's order, bias then mask, is the chain's; two masks or
// two biases on one id would not fit one edit.
class ProcessorChain final : public LogitsProcessor {
 public:
  explicit ProcessorChain(std::vector<std::shared_ptr<LogitsProcessor>> parts);
  void Process(std::span<const TokenId> generated, std::span<float> logits) override;
  bool Describable() const override { return describable_; }
  void Describe(std::span<const TokenId> generated, LogitsEdit& edit) override;

 private:
  std::vector<std::shared_ptr<LogitsProcessor>> parts_;
  bool describable_ = false;
};

}  // namespace ropeserve
