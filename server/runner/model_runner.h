// The model runner: turns a StepPlan into the batch's tensors (in exactly
// one place), runs the decoder's paged forward and samples every sequence
// that needs a token, returning only ids and logprobs to the engine.
//
// State kept across steps and updated from the plans' diffs: each live
// request's block table as a row of a persistent [rows, max_blocks] int32
// tensor on the model's device (a step scatters the new entries and
// gathers its sequences' rows), and its sampler state. A step's metadata
// (ids, positions, slots, query starts, context lengths, table rows,
// logits rows, each query row's sequence and visible context) goes to the
// device as one buffer in one asynchronous copy (pinned host memory on a
// GPU). Each logits row is reduced where it lies
// (logsumexp, max, argmax); only the rows the host sampler needs whole
// (random sampling, penalties, processors, top logprobs) come back, so a
// greedy batch returns three numbers per sequence, in two device-to-host
// transfers per step (logsumexp and max together, then argmax). Rows that
// need the host sampler still come back whole.
// Threading: the engine's thread only.
#pragma once

#include <cstdint>
#include <memory>

#include "server/engine/model_executor.h"

namespace ropeserve {

class PagedModel;

class ModelRunner final : public LogitsExecutor {
 public:
  // Allocates num_blocks x block_size token slots of K/V for every layer.
  // `model` (a DecoderModel when serving; the tests' reference model as
  // their oracle) must outlive the runner.
  ModelRunner(const PagedModel& model, std::int64_t num_blocks, std::int64_t block_size);
  ~ModelRunner() override;

  std::int64_t vocab_size() const override;

 protected:
  StatusOr<StepLogits> Forward(const StepPlan& plan) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ropeserve
