// A step's logits rows -> its sampled tokens, with the host sampler: the
// torch-free half of the sampler room (server/sampler/sampler.h is the
// runner's entry; the engine tests' fake models call SampleStep directly,
// tests/engine/logits_executor.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "server/common/status.h"
#include "server/engine/model_executor.h"
#include "server/engine/step_plan.h"
#include "server/sampler/host_sampler.h"

namespace ropeserve {

// Row-major [rows, vocab] float32 logits: the logits_rows() of each
// sequence of the plan (one, or 1 + num_draft), in plan order. `owner` keeps the memory alive.
struct StepLogits {
  const float* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  // Per row log(sum(exp(row))) when the producer computes it (vectorized,
  // float32 like the reference implementations' log_softmax); null: the
  // sampler computes it.
  const float* logsumexp = nullptr;
  // Per row, when the producer reduces the rows itself: the chosen token
  // (`argmax`: the lowest id of the largest logit, or, for rows a device
  // drew under HostSampler::DeviceDrawOf, the drawn token) and its logit
  // (`max`). With them (and logsumexp), rows the sampler does not need
  // whole may be left out of `data`: row i is data row row_index[i], or
  // absent when that is -1 (HostSampler::TakeReduced then takes the token).
  // row_index null: row i is data row i.
  const float* max = nullptr;
  const std::int64_t* argmax = nullptr;
  const std::int64_t* row_index = nullptr;
  // Per row, when the producer took the top logprobs where the rows lie:
  // the `top_k` largest raw logits and their ids ([rows, top_k] row-major;
  // null when no reduced row asked for top logprobs).
  std::int64_t top_k = 0;
  const float* top_logits = nullptr;
  const std::int64_t* top_ids = nullptr;
  // Row-major [prompt_rows, vocab]: one row per prompt logprob target of
  // the plan's sequences, in plan order (null when none was asked).
  const float* prompt_data = nullptr;
  std::int64_t prompt_rows = 0;
  std::shared_ptr<const void> owner;
  // Row i of the plan (empty when it was left out).
  std::span<const float> Row(std::int64_t i) const {
    const std::int64_t at = row_index != nullptr ? row_index[i] : i;
    if (at < 0) return {};
    return {data + at * vocab, static_cast<std::size_t>(vocab)};
  }
};

// Samples the rows of `logits` (the plan's sequences with needs_logits, in
// order) with `sampler`: a sequence's drafts are verified in order, each
// row drawn as a non-speculative step would draw it and the rest skipped
// at the first draw that differs from its draft (speculative.h). Turns the
// prompt rows into prompt logprobs (raw logits, as vLLM).
StatusOr<StepOutput> SampleStep(HostSampler& sampler, const StepPlan& plan, const StepLogits& logits);

}  // namespace ropeserve
