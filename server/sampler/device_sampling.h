// The sampler's device half (vLLM v1's sampling tensors in its persistent
// input batch, and its GPU sampler). Each live request's sampling
// parameters are a row of persistent tensors on the model's device,
// written once, when a plan adds the request (the same diffs as the block
// table); penalty counts live there too, updated from the tokens the host
// sampler learned. Per step, the rows a device may draw (HostSampler::
// DeviceDrawOf) are processed where they lie, in the host sampler's order:
// the processor's edit (logit_bias as a sparse add, a grammar's mask as a
// token bitmask, as xgrammar gives vLLM), then the repetition / frequency /
// presence penalties; then drawn there: greedy by argmax on any device,
// random sampling on CUDA by kernels/cuda's SampleRows keyed by (seed,
// tokens so far). Only each row's token, its raw logit and the top
// logprobs asked for go back to the host.
//
// Everything but the random draw is device-generic tensor code, so the CPU
// runs it in the tests (RunnerOptions::sampling = kDevice), held equal to
// the host sampler (the oracle) token for token and logprob for logprob.
// Threading: the runner's thread only.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "server/common/status.h"
#include "server/engine/step_plan.h"
#include "server/models/upload_buffer.h"
#include "server/sampler/host_sampler.h"

namespace ropeserve {

struct DrawSelection;  // device_sampling.cc: the rows a step draws here, and their data

class DeviceSampling {
 public:
  DeviceSampling(std::int64_t vocab, at::Device device);

  // Applies the plan's added and removed requests (every plan, before its
  // forward): the added ones' parameters (and prompt tokens, for the
  // repetition penalty) reach the device in one copy.
  void Apply(const StepPlan& plan);

  struct Draws {
    std::vector<char> drawn;  // per logits row: drawn here (the host takes `token`)
    at::Tensor token;         // [R] int64 on the device: the drawn rows' tokens (the raw argmax elsewhere)
    at::Tensor top_logits;    // [R, k] float32: each row's k largest raw logits, or undefined (k = 0)
    at::Tensor top_ids;       // [R, k] int64: their ids
  };
  // Processes and draws the rows of `logits` ([R, vocab] float32: the plan's
  // sequences' logits rows in order) that the device may draw: those with a
  // HostSampler::DeviceDraw, random ones only when `random` (a CUDA device:
  // the draw's kernel), and a sequence's draft rows only when its draw is
  // plain (a processor or penalties would see tokens not yet accepted).
  // The step's per-row data (slots, offsets, penalty rows, new counts,
  // biases, bitmasks) reaches the device in one copy. `logits_argmax`, when
  // defined, is logits' lowest argmax per row (the step's LogitsSummary):
  // a step whose rows nothing edits takes its greedy tokens from it
  // instead of a second argmax.
  StatusOr<Draws> Draw(const HostSampler& sampler, const StepPlan& plan, const at::Tensor& logits, bool random,
                       const at::Tensor& logits_argmax = {});

  // Rows of the persistent tensors: parameter rows (one per live request)
  // and penalty-count rows (one per live request with penalties).
  std::int64_t parameter_rows() const { return ints_.size(0); }
  std::int64_t penalty_rows() const { return counts_.defined() ? counts_.size(0) : 0; }

 private:
  // Which rows of the plan are drawn here (marked in `drawn`), with their
  // edits, penalties and the penalty counts not yet on the device.
  Status Select(const HostSampler& sampler, const StepPlan& plan, bool random, DrawSelection& sel,
                std::vector<char>& drawn);
  // The selection's per-row data into the step's staging buffer (its
  // layout recorded in `sel`), uploaded in one copy.
  at::Tensor Stage(std::int64_t R, DrawSelection& sel);
  // The counts updated, then the rows' processing (edits, then penalties),
  // on a copy of `logits` when any row changes. `slots`: each row's
  // parameter slot as int64 indices (defined when a row is penalized).
  at::Tensor Process(const at::Tensor& logits, const DrawSelection& sel, const at::Tensor& up, const at::Tensor& slots);

  struct Request {
    std::int64_t slot = 0;
    std::int64_t penalty_row = -1;  // -1: no penalties
    std::size_t counted = 0;        // tokens of `generated` already in its counts
  };
  // Frees request `id`'s rows (none when it has none).
  void Release(RequestId id);
  std::int64_t TakeSlot();
  std::int64_t TakePenaltyRow();

  const std::int64_t vocab_, words_;  // words_: 32-bit words of a row's bitmask
  const at::Device device_;
  at::Tensor ints_;     // [slots, 2] int64: top_k, seed
  at::Tensor floats_;   // [slots, 4] float32: temperature, top_p, min_p, repetition penalty
  at::Tensor doubles_;  // [slots, 2] float64: frequency, presence penalty (the host sums f * n + p in double)
  at::Tensor counts_;   // [penalty rows, vocab] int32: times each token was generated
  at::Tensor prompt_;   // [penalty rows, vocab] bool: in the prompt (repetition penalty only)
  at::Tensor shifts_;   // [32] int32: 0..31, to unpack bitmask words
  std::vector<std::int64_t> free_slots_, free_penalty_rows_;
  std::unordered_map<RequestId, Request> requests_;
  UploadBuffer<std::int64_t> added_;  // an Apply's new rows
  UploadBuffer<std::int32_t> step_;   // a Draw's per-row data
};

}  // namespace ropeserve
