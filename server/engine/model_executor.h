// The engine's view of a model: runs one StepPlan, returns next-token
// logits. An interface so the engine loop is tested with a fake model and
// runs the real one through ModelRunner (server/runner/), which owns the
// tensors. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "server/common/status.h"
#include "server/engine/step_plan.h"

namespace ropeserve {

// Row-major [rows, vocab] float32 logits, one row per sequence of the plan
// with needs_logits, in plan order. `owner` keeps the memory alive.
struct StepLogits {
  const float* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  // Per row log(sum(exp(row))) when the executor computes it (vectorized,
  // float32 like the reference implementations' log_softmax); null: the
  // engine computes it. Logprobs need it for every sampled token, and a
  // scalar pass over a 152k vocabulary costs ~1.5 ms per row.
  const float* logsumexp = nullptr;
  std::shared_ptr<const void> owner;
  std::span<const float> Row(std::int64_t i) const {
    return {data + i * vocab, static_cast<std::size_t>(vocab)};
  }
};

class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;
  virtual StatusOr<StepLogits> Execute(const StepPlan& plan) = 0;
  virtual std::int64_t vocab_size() const = 0;
};

}  // namespace ropeserve
