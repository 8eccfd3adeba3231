#include "bench/spec_bench.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <map>
#include <random>

#include "bench/workload.h"
#include "server/models/decoder.h"
#include "server/runner/model_runner.h"

namespace ropeserve::bench {

namespace {

// Expected tokens per step with K proposals each accepted with probability
// a (independently) until the first rejection, plus the step's own token.
double TokensPerStep(double a, int k) { return (1.0 - std::pow(a, k + 1)) / (1.0 - a); }

}  // namespace

StatusOr<nlohmann::json> MeasureVerifyCost(const DecoderModel& model, const BenchOptions& o,
                                           const VerifyCostOptions& v) {
  const ModelConfig& c = model.config();
  int max_k = 0;
  for (int k : v.ks) max_k = std::max(max_k, k);
  const std::int64_t bs = o.block_size;
  // The context, shortened for models with fewer positions.
  const std::int64_t context = std::min<std::int64_t>(v.context, c.max_position_embeddings - max_k - 1);
  if (context < 1) return InvalidArgument("the model has too few positions to verify proposals");
  const std::int64_t per_seq = (context + max_k + 1 + bs - 1) / bs;  // blocks
  std::mt19937_64 rng(o.seed);
  auto random_ids = [&](std::int64_t n) {
    std::vector<TokenId> ids(static_cast<std::size_t>(n));
    for (auto& t : ids) t = static_cast<TokenId>(rng() % static_cast<std::uint64_t>(c.vocab_size));
    return ids;
  };
  nlohmann::json out = nlohmann::json::array();
  for (const int batch : v.batches) {
    RunnerOptions ro;
    ro.max_num_seqs = batch;
    ro.max_num_batched_tokens = std::max<std::int64_t>(context, static_cast<std::int64_t>(batch) * (max_k + 1));
    ModelRunner runner(model, per_seq * batch, bs, ro);
    // Each sequence's context, prefilled one sequence per step.
    for (int i = 0; i < batch; ++i) {
      StepPlan plan;
      plan.block_size = static_cast<int>(bs);
      SamplingSpec greedy;
      greedy.id = static_cast<RequestId>(i + 1);
      plan.added.push_back(greedy);
      ScheduledSequence s;
      s.request_id = greedy.id;
      s.token_ids = random_ids(context);
      s.reset_blocks = true;
      for (std::int64_t b = 0; b < per_seq; ++b) s.new_blocks.push_back(static_cast<BlockId>(i * per_seq + b));
      s.needs_logits = true;
      plan.sequences.push_back(std::move(s));
      RS_RETURN_IF_ERROR(runner.Execute(plan).status());
    }
    // Steps of K proposals (random: verification stops at the first, but
    // every row is computed as in a real step) at the same positions.
    std::vector<int> shapes = {0};
    shapes.insert(shapes.end(), v.ks.begin(), v.ks.end());
    std::map<int, std::vector<double>> seconds;
    auto step = [&](int k) -> Status {
      StepPlan plan;
      plan.block_size = static_cast<int>(bs);
      for (int i = 0; i < batch; ++i) {
        ScheduledSequence s;
        s.request_id = static_cast<RequestId>(i + 1);
        s.start_position = context;
        s.token_ids = random_ids(1 + k);
        s.num_draft = k;
        s.needs_logits = true;
        plan.sequences.push_back(std::move(s));
      }
      const auto start = std::chrono::steady_clock::now();
      RS_RETURN_IF_ERROR(runner.Execute(plan).status());
      seconds[k].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return Status::Ok();
    };
    for (int k : shapes) RS_RETURN_IF_ERROR(step(k));  // warm-up
    seconds.clear();
    for (int r = 0; r < v.rounds; ++r)
      for (int k : shapes) RS_RETURN_IF_ERROR(step(k));
    const double decode = Percentile(seconds[0], 0.5);
    nlohmann::json row = {{"batch", batch}, {"context", context}, {"decode_step_ms", 1e3 * decode}};
    nlohmann::json ks = nlohmann::json::array();
    for (int k : v.ks) {
      const double t = Percentile(seconds[k], 0.5);
      const double cost = decode > 0 ? t / decode : 0;
      nlohmann::json speedup;
      for (double a : {0.3, 0.5, 0.7}) {
        char key[8];
        std::snprintf(key, sizeof key, "%.1f", a);
        speedup[key] = cost > 0 ? TokensPerStep(a, k) / cost : 0.0;
      }
      ks.push_back({{"k", k}, {"step_ms", 1e3 * t}, {"relative_cost", cost}, {"speedup_at_acceptance", speedup}});
    }
    row["verify"] = ks;
    out.push_back(row);
  }
  return out;
}

}  // namespace ropeserve::bench
