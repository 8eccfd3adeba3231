#include "server/sampler/step_sampling.h"

#include <algorithm>

namespace ropeserve {

namespace {

// The token of logits row `row` for request `id`: sampled from the whole row,
// or taken from its reduction when the producer left the row out.
StatusOr<SampledToken> SampleRow(HostSampler& sampler, RequestId id, const StepLogits& logits, std::int64_t row) {
  std::optional<double> lse;
  if (logits.logsumexp != nullptr) lse = logits.logsumexp[row];
  const std::span<const float> r = logits.Row(row);
  if (!r.empty()) return sampler.Sample(id, r, lse);
  if (logits.max == nullptr || logits.argmax == nullptr || !lse)
    return Internal("the forward left out a logits row without its reduction");
  const std::int64_t a = logits.argmax[row];
  if (a < 0 || a >= logits.vocab) return Internal("the forward's argmax is outside the vocabulary");
  std::vector<std::pair<TokenId, float>> top;
  if (logits.top_logits != nullptr && logits.top_ids != nullptr)
    for (std::int64_t k = 0; k < logits.top_k; ++k) {
      const std::int64_t tid = logits.top_ids[row * logits.top_k + k];
      if (tid < 0 || tid >= logits.vocab) return Internal("the forward's top logprob ids are outside the vocabulary");
      top.emplace_back(static_cast<TokenId>(tid), logits.top_logits[row * logits.top_k + k]);
    }
  return sampler.TakeReduced(id, static_cast<TokenId>(a), logits.max[row], *lse, top);
}

}  // namespace

StatusOr<StepOutput> SampleStep(HostSampler& sampler, const StepPlan& plan, const StepLogits& logits) {
  StepOutput out;
  std::int64_t row = 0;
  for (const auto& s : plan.sequences) {
    if (!s.needs_logits) continue;
    if (row + s.logits_rows() > logits.rows)
      return Internal("the forward returned fewer logits rows than the plan needs");
    // Row i is drawn only when the draft before it was accepted (the first
    // row always): the draws a non-speculative run makes, in its order.
    const auto drafts = s.drafts();
    for (std::int64_t i = 0; i <= s.num_draft; ++i) {
      RS_ASSIGN_OR_RETURN(SampledToken t, SampleRow(sampler, s.request_id, logits, row + i));
      const TokenId token = t.token;
      out.tokens.push_back(std::move(t));
      if (i == s.num_draft || token != drafts[static_cast<std::size_t>(i)]) break;
    }
    row += s.logits_rows();
  }
  std::int64_t prow = 0;
  for (const auto& s : plan.sequences) {
    if (s.prompt_logprob_targets.empty()) continue;
    if (prow + static_cast<std::int64_t>(s.prompt_logprob_targets.size()) > logits.prompt_rows)
      return Internal("the forward returned fewer prompt logits rows than the plan needs");
    PromptLogprobs p;
    p.id = s.request_id;
    p.first_position = s.prompt_logprobs_from;
    for (TokenId target : s.prompt_logprob_targets) {
      std::span<const float> r{logits.prompt_data + prow * logits.vocab, static_cast<std::size_t>(logits.vocab)};
      const double lse = LogSumExp(r);
      GeneratedToken g;
      g.id = target;
      g.logprob = LogprobOf(r, target, lse);
      const float own = r[static_cast<std::size_t>(target)];
      g.rank = 1 + std::count_if(r.begin(), r.end(), [own](float x) { return x > own; });
      for (auto [id, lp] : TopLogprobs(r, s.prompt_top_logprobs, lse))
        g.top_logprobs.emplace_back(static_cast<TokenId>(id), lp);
      p.tokens.push_back(std::move(g));
      ++prow;
    }
    out.prompt.push_back(std::move(p));
  }
  return out;
}

}  // namespace ropeserve
