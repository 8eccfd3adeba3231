// ModelRunner: the one place a StepPlan becomes tensors. Owns the paged KV
// cache of a DecoderModel and runs one packed forward per step.
// Threading: called only from the engine thread.
#pragma once

#include <memory>

#include "server/engine/model_executor.h"

namespace ropeserve {

class DecoderModel;

class ModelRunner final : public ModelExecutor {
 public:
  // Allocates num_blocks x block_size token slots of K/V for every layer.
  // reference_attention: use the slow gather-based attention (the oracle).
  ModelRunner(const DecoderModel& model, std::int64_t num_blocks, std::int64_t block_size,
              bool reference_attention = false);
  ~ModelRunner() override;

  StatusOr<StepLogits> Execute(const StepPlan& plan) override;
  std::int64_t vocab_size() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ropeserve
