// The sampler room's entry for a runner (vLLM v1's Sampler beside its
// GPU model runner): every live request's sampling state, on the host
// (HostSampler, the oracle) and, where rows are drawn on the model's
// device, DeviceSampling's persistent tensors; a step's logits in, its
// sampled tokens and logprobs out. The runner owns one and, for each plan,
// calls Apply before its forward and Sample after it: the engine sees only
// the StepOutput, and sampling no longer crosses between the engine's
// classes and the runner's.
//
// Every row is reduced where it lies (logsumexp, max, argmax: three
// numbers back per row); a row comes back whole only when the host sampler
// needs it (random sampling, penalties, processors, top logprobs) or its
// max is NaN (the host's argmax decides those). On a GPU a greedy batch so
// returns a few bytes per sequence instead of its [rows, vocab] logits; on
// the CPU the rows are not copied, only marked. With DeviceSampling
// (SamplerPlacement), the rows it may process and draw are drawn where they
// lie and only the token, its logit and the top logprobs asked for come
// back. Threading: the runner's thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "server/common/status.h"
#include "server/engine/model_executor.h"
#include "server/engine/step_plan.h"
#include "server/sampler/host_sampler.h"
#include "server/sampler/logits_summary.h"

namespace ropeserve {

class DeviceSampling;

// Where rows are processed and drawn: kAuto, by DeviceSampling on a CUDA
// device and by the host sampler on the CPU; kHost, always the host
// sampler; kDevice, DeviceSampling on any device (on the CPU only greedy
// rows: random draws need the CUDA kernel), how the tests hold the device
// path equal to the host sampler on the CPU.
enum class SamplerPlacement { kAuto, kHost, kDevice };

struct SamplerStats {
  std::uint64_t device_draws = 0;  // logits rows drawn by DeviceSampling
  // Steps whose reduction came with their forward (ReducedRows) and whose
  // tokens were read from its host copy: no kernel and no copy of their own.
  std::uint64_t reduced_with_forward = 0;
};

// A step's rows reduced by the forward itself, as a CUDA graph of a padded
// decode step does after its last layer (server/runner/model_runner.cc):
// the summary of all `rows` rows (the plan's first, fillers after) on the
// device, and its packed form (LogitsSummary::packed's layout for `rows`
// rows) copied into pinned host memory behind it on the same stream. Sample
// then reduces nothing itself; a step of greedy rows that nothing draws on
// the device waits for the copy (`wait`) and reads `host`: one graph
// launch and one wait a step.
struct ReducedRows {
  LogitsSummary summary;               // logsumexp, max, argmax [rows]
  const std::int32_t* host = nullptr;  // [4 * rows], valid once wait() returns
  std::int64_t rows = 0;
  std::function<void()> wait;
};

class Sampler {
 public:
  Sampler(std::int64_t vocab, at::Device device, SamplerPlacement placement);
  ~Sampler();

  // The plan's added and removed requests (every plan, before its forward).
  void Apply(const StepPlan& plan);
  // The plan's tokens from its logits: `logits` [R, vocab] float32 on the
  // model's device, the logits rows of the plan's sequences with
  // needs_logits in plan order (R = 0: undefined); `prompt` [P, vocab]
  // float32 on any device, a row per prompt logprob target in plan order
  // (undefined when none was asked). `reduced`: the rows' reduction done
  // with the forward (its first R rows are these logits'), or null.
  StatusOr<StepOutput> Sample(const StepPlan& plan, const at::Tensor& logits, const at::Tensor& prompt,
                              const ReducedRows* reduced = nullptr);

  const SamplerStats& stats() const { return stats_; }
  // DeviceSampling's persistent tensors, or null when the host draws every row.
  const DeviceSampling* device_sampling() const { return device_.get(); }

 private:
  const std::int64_t vocab_;
  HostSampler host_;
  std::unique_ptr<DeviceSampling> device_;  // null: the host sampler draws every row
  SamplerStats stats_;
};

}  // namespace ropeserve
