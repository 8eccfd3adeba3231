// Plans for the sampler tests (no engine): one sequence per request, one
// logits row each.
#pragma once

#include <utility>
#include <vector>

#include "server/engine/step_plan.h"

namespace ropeserve::testing {

inline StepPlan OneRowEach(const std::vector<RequestId>& ids, std::vector<SamplingSpec> added = {},
                           std::vector<RequestId> removed = {}) {
  StepPlan plan;
  plan.added = std::move(added);
  plan.removed = std::move(removed);
  for (RequestId id : ids) {
    ScheduledSequence s;
    s.request_id = id;
    s.token_ids = {1};
    s.needs_logits = true;
    plan.sequences.push_back(s);
  }
  return plan;
}

}  // namespace ropeserve::testing
