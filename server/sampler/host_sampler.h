// The reference sampler, on the host: every request's sampling state
// (seeded generator, penalty counts, tokens so far), kept across steps by
// the runner that owns it and updated from StepPlan diffs. The CPU runner
// samples with it. A runner whose device samples (server/runner/
// device_sampling.h) processes and draws the rows DeviceDraw describes
// there and hands back only each drawn token, its logit, the row's
// logsumexp and the top logprobs asked for (TakeReduced).
//
// Seeded sampling: on the host, a request's draws come from its own
// mt19937_64 seeded with its seed; on a CUDA device, draw k of a request is
// a counter-based function of (seed, k), k = the tokens it generated so
// far. Either way a request's tokens do not depend on what it is batched
// with or on preemption (its state stays with the runner); the same seed
// gives different tokens on the CPU and on a GPU (different generators,
// different floating-point sums), as in vLLM.
// Torch-free; not thread-safe (the runner's thread).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/common/status.h"
#include "server/engine/step_plan.h"

namespace ropeserve {

class HostSampler {
 public:
  // Applies a plan's added and removed requests.
  void Apply(const StepPlan& plan);
  // Samples request `id`'s next token from its logits row; `lse`, when
  // known, is log(sum(exp(row))). Internal error for an unknown request.
  StatusOr<SampledToken> Sample(RequestId id, std::span<const float> logits, std::optional<double> lse);
  // False when request `id` samples greedily with no processor, no
  // penalties and no top logprobs: then its row's largest logit, that
  // logit's lowest id and the row's logsumexp are all it needs (a device
  // can reduce the row and send back three numbers), see SampleArgmax.
  bool NeedsRow(RequestId id) const;
  // Request `id`'s next draw as a device makes it: the row's processing
  // (the processor's LogitsEdit, then the penalties, over the request's
  // tokens so far), the draw (greedy, or random with temperature, top-k/p,
  // min-p keyed by (seed, offset)) and the top logprobs of the raw row.
  // nullopt when the host must sample it (a processor that cannot state
  // its effect as an edit, or an unknown request).
  struct DeviceDraw {
    SamplingParams params;                 // the request's (temperature 0: greedy)
    std::uint64_t seed = 0;                // resolved: params.seed, or the one drawn for it
    std::uint64_t offset = 0;              // the draw's index: tokens generated so far
    LogitsProcessor* processor = nullptr;  // Describable; null when none
    std::span<const TokenId> generated;    // the request's tokens so far (until its next token)
    std::size_t top_logprobs = 0;
    // Greedy or plain random sampling, nothing to process or report.
    bool plain() const { return processor == nullptr && !params.has_penalties() && top_logprobs == 0; }
  };
  std::optional<DeviceDraw> DeviceDrawOf(RequestId id) const;
  // Request `id`'s token when its row was reduced where it lies: `token`
  // (the argmax when !NeedsRow(id), the lowest id of the largest logit;
  // otherwise a device's draw under DeviceDrawOf(id)), logprob logit - lse.
  // `top`: the row's largest raw logits with their ids (min(top_logprobs,
  // vocab) of them when the request asked; any order), reported as
  // logprobs, most likely first, ties by lower id. For the argmax, the same
  // token, logprob and top logprobs as Sample on the whole row.
  StatusOr<SampledToken> TakeReduced(RequestId id, TokenId token, double logit, double lse,
                                     std::span<const std::pair<TokenId, float>> top = {});
  std::size_t size() const { return states_.size(); }

 private:
  struct State {
    SamplingSpec spec;
    SamplerRng rng;
    PenaltyState penalties;
    std::vector<TokenId> generated;
  };
  std::unordered_map<RequestId, State> states_;
  std::vector<float> scratch_, penalized_;
};

}  // namespace ropeserve
