// The reference sampler, on the host: every request's sampling state
// (seeded generator, penalty counts, tokens so far), kept across steps by
// the runner that owns it and updated from StepPlan diffs. The CPU runner
// samples with it; a device sampler (kernels/cuda) is tested against it.
// Torch-free; not thread-safe (the runner's thread).
#pragma once

#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/common/status.h"
#include "server/engine/step_plan.h"

namespace ropeserve {

struct SampledToken {
  RequestId id = 0;
  TokenId token = 0;
  double logprob = 0;                           // under log_softmax of the raw logits
  std::vector<std::pair<TokenId, double>> top;  // the top_logprobs most likely, when asked
};

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
  // Request `id`'s token when !NeedsRow(id): `argmax` (the lowest id of the
  // row's largest logit `max_logit`), logprob max_logit - lse. The same
  // token and logprob as Sample on the whole row.
  StatusOr<SampledToken> SampleArgmax(RequestId id, TokenId argmax, double max_logit, double lse);
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
