// `ropeserve bench --spec-verify-cost`: what verifying K speculative
// proposals costs against one decode step, measured on the serving runner
// (ModelRunner: forward, row reduction, sampling) at batch 1 and 16, and the
// speed-up that cost gives at acceptance rates 0.3 / 0.5 / 0.7 (i.i.d.
// acceptance per proposal: a step yields (1 - a^(K+1)) / (1 - a) tokens on
// average, so the speed-up is that over the step's relative cost; prompt
// lookup proposes only when an n-gram matches, and steps without proposals
// cost one decode).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "bench/offline_bench.h"
#include "server/common/status.h"

namespace ropeserve {
class DecoderModel;
}

namespace ropeserve::bench {

// Decode steps of `batches` sequences with `context` tokens cached (fewer
// when the model's positions end sooner), with 0
// and each of `ks` proposals per sequence, interleaved over `rounds`
// rounds; medians per shape.
struct VerifyCostOptions {
  std::vector<int> batches = {1, 16};
  std::vector<int> ks = {2, 4, 8};
  int context = 256;
  int rounds = 9;
};
StatusOr<nlohmann::json> MeasureVerifyCost(const DecoderModel& model, const BenchOptions& o,
                                           const VerifyCostOptions& v = {});

}  // namespace ropeserve::bench
