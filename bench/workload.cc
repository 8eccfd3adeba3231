#include "bench/workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ropeserve::bench {

StatusOr<std::function<std::int64_t(std::mt19937_64&)>> ParseDist(const std::string& spec, bool is_input) {
  if (spec == "sharegpt") {
    const double mu = is_input ? std::log(150.0) : std::log(120.0);
    const double sigma = is_input ? 0.9 : 0.8;
    return std::function<std::int64_t(std::mt19937_64&)>([mu, sigma](std::mt19937_64& rng) {
      std::lognormal_distribution<double> d(mu, sigma);
      return std::max<std::int64_t>(4, static_cast<std::int64_t>(d(rng)));
    });
  }
  if (spec.rfind("uniform:", 0) == 0) {
    long long a = 0, b = 0;
    if (std::sscanf(spec.c_str(), "uniform:%lld:%lld", &a, &b) != 2 || a < 1 || b < a)
      return InvalidArgument("bad length distribution '" + spec + "' (uniform:A:B with 1 <= A <= B)");
    return std::function<std::int64_t(std::mt19937_64&)>(
        [a, b](std::mt19937_64& rng) { return std::uniform_int_distribution<std::int64_t>(a, b)(rng); });
  }
  char* end = nullptr;
  const long long n = std::strtoll(spec.c_str(), &end, 10);
  if (end == spec.c_str() || *end != '\0' || n < 1)
    return InvalidArgument("bad length distribution '" + spec + "' (N, uniform:A:B or sharegpt)");
  return std::function<std::int64_t(std::mt19937_64&)>([n](std::mt19937_64&) { return static_cast<std::int64_t>(n); });
}

StatusOr<Workload> MakeWorkload(const std::string& input_len, const std::string& output_len, int num_requests,
                                std::uint64_t seed, std::int64_t vocab, std::int64_t max_len,
                                const std::vector<TokenId>* document) {
  if (document != nullptr && document->empty()) return InvalidArgument("the workload's document has no tokens");
  RS_ASSIGN_OR_RETURN(auto in, ParseDist(input_len, true));
  RS_ASSIGN_OR_RETURN(auto out, ParseDist(output_len, false));
  std::mt19937_64 rng(seed);
  Workload w;
  for (int i = 0; i < num_requests; ++i) {
    std::int64_t p = std::min(in(rng), max_len - 1);
    if (document != nullptr) p = std::min(p, static_cast<std::int64_t>(document->size()));
    std::int64_t g = std::min(out(rng), max_len - p);
    std::vector<TokenId> prompt(static_cast<std::size_t>(p));
    if (document != nullptr) {
      const auto from = static_cast<std::ptrdiff_t>(rng() % (document->size() - static_cast<std::size_t>(p) + 1));
      std::copy(document->begin() + from, document->begin() + from + p, prompt.begin());
    } else {
      for (auto& t : prompt) t = static_cast<TokenId>(rng() % static_cast<std::uint64_t>(vocab));
    }
    w.prompts.push_back(std::move(prompt));
    w.output_lens.push_back(g);
  }
  return w;
}

StaticPlan PlanStaticBatches(const Workload& w, int batch_size, std::int64_t position_limit) {
  StaticPlan plan;
  const std::size_t n = static_cast<std::size_t>(std::max(batch_size, 1));
  for (std::size_t b = 0; b < w.prompts.size(); b += n) {
    StaticBatch batch{b, std::min(w.prompts.size(), b + n), 0, 0};
    for (std::size_t i = batch.begin; i < batch.end; ++i) {
      batch.pad_to = std::max<std::int64_t>(batch.pad_to, static_cast<std::int64_t>(w.prompts[i].size()));
      batch.steps = std::max(batch.steps, w.output_lens[i]);
    }
    plan.tokens_per_sequence = std::max(plan.tokens_per_sequence, std::min(batch.pad_to + batch.steps, position_limit));
    plan.batches.push_back(batch);
  }
  for (auto& batch : plan.batches) {
    batch.steps = std::max<std::int64_t>(0, std::min(batch.steps, plan.tokens_per_sequence - batch.pad_to));
    for (std::size_t i = batch.begin; i < batch.end; ++i) plan.useful += std::min(w.output_lens[i], batch.steps);
  }
  return plan;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace ropeserve::bench
