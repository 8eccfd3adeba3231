// The engine's own logits processors: OpenAI's logit_bias, and a chain of
// processors applied in order (logit_bias, then a grammar's mask). Both
// state their effect as a LogitsEdit, so their rows are processed where
// the logits lie. Torch-free.
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

// Several processors in order. Describable when every part is, at most one
// is a LogitBias and at most one is something else (a grammar: what the
// service builds): a bias and a mask commute (the mask's -inf absorbs any
// finite bias), so the edit's order, bias then mask, is the chain's; two
// masks or two biases on one id would not fit one edit.
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
