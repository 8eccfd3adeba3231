// Fake-model helpers for engine and service tests (no LibTorch): the logits
// of one step, one row per logits row of the plan, `value` at the id the
// pick chooses and 0 elsewhere (pick < 0: a uniform row).
#pragma once

#include <memory>
#include <vector>

#include "server/engine/model_executor.h"
#include "tests/engine/logits_executor.h"

namespace ropeserve::testing {

// One row per logits row of the plan: pick(sequence, i) chooses for the row
// of the sequence's token_ids[i] (its last token's, and with drafts each
// draft's before it).
template <typename Pick>
StepLogits OneHotRows(const StepPlan& plan, std::int64_t vocab, float value, Pick pick) {
  auto buf = std::make_shared<std::vector<float>>();
  StepLogits out;
  out.vocab = vocab;
  for (const auto& s : plan.sequences) {
    for (std::int64_t r = 0; r < s.logits_rows(); ++r) {
      std::vector<float> row(static_cast<std::size_t>(vocab), 0.0f);
      const std::int64_t id = pick(s, s.token_ids.size() - static_cast<std::size_t>(s.logits_rows() - r));
      if (id >= 0) row[static_cast<std::size_t>(id)] = value;
      buf->insert(buf->end(), row.begin(), row.end());
      ++out.rows;
    }
  }
  out.data = buf->data();
  out.owner = buf;
  return out;
}

// pick(sequence) for each of its rows (plans without drafts: one).
template <typename Pick>
StepLogits OneHotLogits(const StepPlan& plan, std::int64_t vocab, float value, Pick pick) {
  return OneHotRows(plan, vocab, value, [&](const ScheduledSequence& s, std::size_t) { return pick(s); });
}

// A decoder that always predicts `token` (vocabulary of 8): what engine
// steps need beside the encoder work a service test is about.
class ConstantTokenModel : public testing::LogitsExecutor {
 public:
  explicit ConstantTokenModel(TokenId token = 1) : token_(token) {}
  StatusOr<StepLogits> Forward(const StepPlan& plan) override {
    return OneHotLogits(plan, 8, 10.0f, [this](const ScheduledSequence&) { return token_; });
  }
  std::int64_t vocab_size() const override { return 8; }

 private:
  TokenId token_;
};

}  // namespace ropeserve::testing
