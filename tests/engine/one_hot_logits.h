// Fake-model helper for engine and service tests (no LibTorch): the logits
// of one step with one row per sequence that needs a token, `value` at the
// id `pick(sequence)` chooses and 0 elsewhere (pick < 0: a uniform row).
#pragma once

#include <memory>
#include <vector>

#include "server/engine/model_executor.h"

namespace ropeserve::testing {

template <typename Pick>
StepLogits OneHotLogits(const StepPlan& plan, std::int64_t vocab, float value, Pick pick) {
  auto buf = std::make_shared<std::vector<float>>();
  StepLogits out;
  out.vocab = vocab;
  for (const auto& s : plan.sequences) {
    if (!s.needs_logits) continue;
    std::vector<float> row(static_cast<std::size_t>(vocab), 0.0f);
    const std::int64_t id = pick(s);
    if (id >= 0) row[static_cast<std::size_t>(id)] = value;
    buf->insert(buf->end(), row.begin(), row.end());
    ++out.rows;
  }
  out.data = buf->data();
  out.owner = buf;
  return out;
}

}  // namespace ropeserve::testing
