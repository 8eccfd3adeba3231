// The engine and service tests' fake models: an executor made of a forward
// that yields host logits rows (StepLogits) and the host sampler, so a test
// writes only the rows it wants sampled. The real runner samples through
// its Sampler (server/sampler/sampler.h) instead. Torch-free.
#pragma once

#include "server/engine/model_executor.h"
#include "server/sampler/host_sampler.h"
#include "server/sampler/step_sampling.h"

namespace ropeserve::testing {

class LogitsExecutor : public ModelExecutor {
 public:
  StatusOr<StepOutput> Execute(const StepPlan& plan) final {
    sampler_.Apply(plan);
    RS_ASSIGN_OR_RETURN(StepLogits logits, Forward(plan));
    return SampleStep(sampler_, plan, logits);
  }

 protected:
  // Logits of the plan's sequences with needs_logits (none for a plan of
  // prefill chunks only).
  virtual StatusOr<StepLogits> Forward(const StepPlan& plan) = 0;
  // The sampler as Forward sees it (the plan already applied): which rows
  // it needs whole.
  const HostSampler& sampler() const { return sampler_; }

 private:
  HostSampler sampler_;
};

}  // namespace ropeserve::testing
