#include "server/engine/model_executor.h"

namespace ropeserve {

StatusOr<StepOutput> SampleRows(HostSampler& sampler, const StepPlan& plan, const StepLogits& logits) {
  StepOutput out;
  std::int64_t row = 0;
  for (const auto& s : plan.sequences) {
    if (!s.needs_logits) continue;
    if (row >= logits.rows) return Internal("the forward returned fewer logits rows than the plan needs");
    std::optional<double> lse;
    if (logits.logsumexp != nullptr) lse = logits.logsumexp[row];
    RS_ASSIGN_OR_RETURN(SampledToken t, sampler.Sample(s.request_id, logits.Row(row), lse));
    out.tokens.push_back(std::move(t));
    ++row;
  }
  return out;
}

StatusOr<StepOutput> LogitsExecutor::Execute(const StepPlan& plan) {
  sampler_.Apply(plan);
  RS_ASSIGN_OR_RETURN(StepLogits logits, Forward(plan));
  return SampleRows(sampler_, plan, logits);
}

}  // namespace ropeserve
