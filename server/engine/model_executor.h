// The engine's view of a model: runs one StepPlan and returns the sampled
// token of every sequence that needed one (with its logprobs). Sampling
// happens in the executor, on the batch's device (the runner's Sampler,
// server/sampler/); the engine never sees logits rows. An interface so the
// engine loop is tested with a fake model (tests/engine/logits_executor.h)
// and runs the real one through ModelRunner (server/runner/), which owns
// the tensors. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "server/common/status.h"
#include "server/engine/request_stream.h"
#include "server/engine/step_plan.h"
#include "server/sampler/sampling.h"

namespace ropeserve {

// Logprobs of prompt tokens first_position, +1, ... of one request.
struct PromptLogprobs {
  RequestId id = 0;
  std::int64_t first_position = 0;
  std::vector<GeneratedToken> tokens;  // the prompt token, its logprob, the alternatives
};

// The sampled tokens of the plan's sequences with needs_logits, in plan
// order: one each, or for a sequence with drafts the accepted drafts and
// the token after them (1 to 1 + num_draft, consecutive in `tokens`);
// prompt logprobs of the sequences with prompt_logprob_targets.
struct StepOutput {
  std::vector<SampledToken> tokens;
  std::vector<PromptLogprobs> prompt;
};

// Threading: called from one thread at a time (the engine's).
class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;
  virtual StatusOr<StepOutput> Execute(const StepPlan& plan) = 0;
  virtual std::int64_t vocab_size() const = 0;
};

}  // namespace ropeserve
