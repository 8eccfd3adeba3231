#include "server/engine/step_plan.h"

namespace ropeserve {

void BlockTables::Apply(const StepPlan& plan) {
  for (RequestId id : plan.removed) tables_.erase(id);
  for (const auto& s : plan.sequences) {
    std::vector<BlockId>& t = tables_[s.request_id];
    if (s.reset_blocks) t.clear();
    t.insert(t.end(), s.new_blocks.begin(), s.new_blocks.end());
  }
}

const std::vector<BlockId>& BlockTables::Of(RequestId id) const {
  static const std::vector<BlockId> kNone;
  auto it = tables_.find(id);
  return it == tables_.end() ? kNone : it->second;
}

}  // namespace ropeserve
