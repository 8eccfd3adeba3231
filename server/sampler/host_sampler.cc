#include "server/sampler/host_sampler.h"

#include <algorithm>

namespace ropeserve {

void HostSampler::Apply(const StepPlan& plan) {
  for (RequestId id : plan.removed) states_.erase(id);
  for (const SamplingSpec& spec : plan.added) {
    State s;
    s.spec = spec;
    s.rng.seed(spec.seed);
    if (spec.params.repetition_penalty != 1.0) s.penalties.prompt_tokens.insert(spec.prompt.begin(), spec.prompt.end());
    s.spec.prompt.clear();  // not needed any more
    states_.insert_or_assign(spec.id, std::move(s));
  }
}

StatusOr<SampledToken> HostSampler::Sample(RequestId id, std::span<const float> logits, std::optional<double> lse) {
  auto it = states_.find(id);
  if (it == states_.end()) return Internal("the runner has no sampling state for request " + std::to_string(id));
  State& s = it->second;
  std::span<const float> row = logits;
  if (s.spec.processor) {
    scratch_.assign(logits.begin(), logits.end());
    s.spec.processor->Process(s.generated, scratch_);
    row = scratch_;
  }
  SampledToken out;
  out.id = id;
  // The processed row is sampled (SampleStep copies it again when penalties
  // apply); the raw one gives the logprobs.
  out.token = static_cast<TokenId>(SampleStep(row, s.spec.params, s.penalties, penalized_, s.rng));
  const double l = lse ? *lse : LogSumExp(logits);
  out.logprob = LogprobOf(logits, out.token, l);
  if (s.spec.top_logprobs > 0)
    for (auto [tid, lp] : TopLogprobs(logits, s.spec.top_logprobs, l))
      out.top.emplace_back(static_cast<TokenId>(tid), lp);
  s.generated.push_back(out.token);
  return out;
}

bool HostSampler::NeedsRow(RequestId id) const {
  auto it = states_.find(id);
  if (it == states_.end()) return true;  // Sample reports it
  const SamplingSpec& spec = it->second.spec;
  return !spec.params.greedy() || spec.params.has_penalties() || spec.processor != nullptr || spec.top_logprobs > 0;
}

std::optional<HostSampler::DeviceDraw> HostSampler::DeviceDrawOf(RequestId id) const {
  auto it = states_.find(id);
  if (it == states_.end()) return std::nullopt;
  const State& s = it->second;
  if (s.spec.processor != nullptr && !s.spec.processor->Describable()) return std::nullopt;
  DeviceDraw d;
  d.params = s.spec.params;
  d.seed = s.spec.seed;
  d.offset = s.generated.size();
  d.processor = s.spec.processor.get();
  d.generated = s.generated;
  d.top_logprobs = s.spec.top_logprobs;
  return d;
}

StatusOr<SampledToken> HostSampler::TakeReduced(RequestId id, TokenId token, double logit, double lse,
                                                std::span<const std::pair<TokenId, float>> top) {
  if (NeedsRow(id) && !DeviceDrawOf(id))
    return Internal("request " + std::to_string(id) + " needs its whole logits row to sample");
  State& s = states_.find(id)->second;
  SampledToken out;
  out.id = id;
  out.token = token;
  out.logprob = logit - lse;
  if (s.spec.top_logprobs > 0) {
    if (top.empty())
      return Internal("request " + std::to_string(id) + " asked for top logprobs its row did not bring back");
    std::vector<std::pair<TokenId, float>> sorted(top.begin(), top.end());
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
      return a.second > b.second || (a.second == b.second && a.first < b.first);
    });
    for (std::size_t k = 0; k < std::min(s.spec.top_logprobs, sorted.size()); ++k)
      out.top.emplace_back(sorted[k].first, static_cast<double>(sorted[k].second) - lse);
  }
  if (s.spec.params.has_penalties()) ++s.penalties.output_counts[token];
  s.generated.push_back(token);
  return out;
}

}  // namespace ropeserve
