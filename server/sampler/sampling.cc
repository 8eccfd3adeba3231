#include "server/sampler/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace ropeserve {

Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0) || !std::isfinite(temperature))
    return InvalidArgument("temperature must be a finite number >= 0");
  if (top_k < -1) return InvalidArgument("top_k must be -1, 0 (disabled) or positive");
  if (!(top_p > 0.0 && top_p <= 1.0)) return InvalidArgument("top_p must be in (0, 1]");
  if (!(min_p >= 0.0 && min_p <= 1.0)) return InvalidArgument("min_p must be in [0, 1]");
  if (!(repetition_penalty > 0.0) || !std::isfinite(repetition_penalty))
    return InvalidArgument("repetition_penalty must be a finite number > 0 (1 = off)");
  if (!(frequency_penalty >= -2.0 && frequency_penalty <= 2.0))
    return InvalidArgument("frequency_penalty must be in [-2, 2]");
  if (!(presence_penalty >= -2.0 && presence_penalty <= 2.0))
    return InvalidArgument("presence_penalty must be in [-2, 2]");
  return Status::Ok();
}

void ApplyTokenMask(std::span<float> logits, bool allow_list, std::span<const TokenId> ids) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  auto in_row = [&](TokenId id) { return id >= 0 && static_cast<std::size_t>(id) < logits.size(); };
  if (!allow_list) {
    for (TokenId id : ids)
      if (in_row(id)) logits[static_cast<std::size_t>(id)] = kNegInf;
    return;
  }
  std::size_t k = 0;  // ids are sorted: one merge walk
  for (std::size_t i = 0; i < logits.size(); ++i) {
    while (k < ids.size() && (ids[k] < 0 || static_cast<std::size_t>(ids[k]) < i)) ++k;
    if (k == ids.size() || static_cast<std::size_t>(ids[k]) != i) logits[i] = kNegInf;
  }
}

void LogitsEdit::ApplyTo(std::span<float> logits) const {
  for (auto [id, b] : bias)
    if (id >= 0 && static_cast<std::size_t>(id) < logits.size()) logits[static_cast<std::size_t>(id)] += b;
  if (masked) ApplyTokenMask(logits, allow_list, ids);
}

void LogitsProcessor::Describe(std::span<const TokenId>, LogitsEdit& edit) { edit = LogitsEdit{}; }

std::int64_t SampleStep(std::span<const float> logits, const SamplingParams& params, PenaltyState& state,
                        std::vector<float>& scratch, SamplerRng& rng) {
  if (!params.has_penalties()) return SampleToken(logits, params, rng);
  scratch.assign(logits.begin(), logits.end());
  ApplyPenalties(scratch, params, state);
  const std::int64_t id = SampleToken(scratch, params, rng);
  ++state.output_counts[id];
  return id;
}

void ApplyPenalties(std::span<float> logits, const SamplingParams& p, const PenaltyState& state) {
  const auto vocab = static_cast<std::int64_t>(logits.size());
  auto in_range = [&](std::int64_t id) { return id >= 0 && id < vocab; };
  if (p.repetition_penalty != 1.0) {
    const auto r = static_cast<float>(p.repetition_penalty);
    auto penalize = [&](std::int64_t id) {
      float& l = logits[static_cast<std::size_t>(id)];
      l = l > 0 ? l / r : l * r;
    };
    for (std::int64_t id : state.prompt_tokens)
      if (in_range(id)) penalize(id);
    for (const auto& [id, n] : state.output_counts)
      if (in_range(id) && !state.prompt_tokens.count(id)) penalize(id);
  }
  if (p.frequency_penalty != 0.0 || p.presence_penalty != 0.0) {
    for (const auto& [id, n] : state.output_counts) {
      if (!in_range(id) || n <= 0) continue;
      logits[static_cast<std::size_t>(id)] -=
          static_cast<float>(p.frequency_penalty * static_cast<double>(n) + p.presence_penalty);
    }
  }
}

namespace {

std::int64_t Argmax(std::span<const float> logits) {
  std::int64_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<std::int64_t>(i);  // strict: ties keep the lower id
  return best;
}

}  // namespace

double LogSumExp(std::span<const float> logits) {
  double m = -std::numeric_limits<double>::infinity();
  for (float x : logits) m = std::max(m, static_cast<double>(x));
  if (!std::isfinite(m)) return m;
  double s = 0;
  for (float x : logits) s += std::exp(static_cast<double>(x) - m);
  return m + std::log(s);
}

std::int64_t SampleToken(std::span<const float> logits, const SamplingParams& p, SamplerRng& rng) {
  if (logits.empty()) return 0;
  if (p.greedy()) return Argmax(logits);

  if ((p.top_k <= 0 || static_cast<std::size_t>(p.top_k) >= logits.size()) && p.top_p >= 1.0 && p.min_p <= 0.0) {
    // Plain temperature sampling: the candidates' order does not change the
    // distribution, so no sort (a full sort of a 152k vocabulary costs
    // ~10 ms per token). Scanned in id order.
    double top = -std::numeric_limits<double>::infinity();
    for (float x : logits) top = std::max(top, static_cast<double>(x) / p.temperature);
    std::vector<double> probs(logits.size());
    double sum = 0;
    for (std::size_t i = 0; i < logits.size(); ++i)
      sum += probs[i] = std::exp(static_cast<double>(logits[i]) / p.temperature - top);
    double r = std::uniform_real_distribution<double>(0.0, sum)(rng);
    std::size_t last = 0;
    for (std::size_t i = 0; i < probs.size(); ++i) {
      if (probs[i] == 0) continue;
      r -= probs[i];
      if (r < 0) return static_cast<std::int64_t>(i);
      last = i;
    }
    return static_cast<std::int64_t>(last);  // r landed on the rounding error at the end
  }

  // Candidates sorted by logit (desc), ties by id, so results do not depend
  // on sort stability.
  std::vector<std::int64_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto by_logit = [&](std::int64_t a, std::int64_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::size_t keep = ids.size();
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < keep) {
    keep = static_cast<std::size_t>(p.top_k);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end(), by_logit);
  } else {
    std::sort(ids.begin(), ids.end(), by_logit);
  }
  ids.resize(keep);

  // Softmax of logits / temperature over the candidates.
  std::vector<double> probs(keep);
  const double top = static_cast<double>(logits[ids[0]]) / p.temperature;
  double sum = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp(static_cast<double>(logits[ids[i]]) / p.temperature - top);
    sum += probs[i];
  }
  for (auto& x : probs) x /= sum;

  // top-p: the smallest prefix whose mass reaches top_p (at least one token).
  if (p.top_p < 1.0) {
    double cum = 0;
    std::size_t n = 0;
    while (n < keep) {
      cum += probs[n++];
      if (cum >= p.top_p) break;
    }
    keep = n;
  }
  // min-p: drop tokens below min_p times the most likely one.
  if (p.min_p > 0.0) {
    const double floor = p.min_p * probs[0];
    std::size_t n = 1;
    while (n < keep && probs[n] >= floor) ++n;
    keep = n;
  }

  double mass = 0;
  for (std::size_t i = 0; i < keep; ++i) mass += probs[i];
  std::uniform_real_distribution<double> uni(0.0, mass);
  double r = uni(rng);
  for (std::size_t i = 0; i < keep; ++i) {
    r -= probs[i];
    if (r < 0) return ids[i];
  }
  return ids[keep - 1];
}

std::vector<std::pair<std::int64_t, double>> TopLogprobs(std::span<const float> logits, std::size_t k,
                                                         std::optional<double> lse_known) {
  k = std::min(k, logits.size());
  std::vector<std::int64_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(
      ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
      [&](std::int64_t a, std::int64_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  const double lse = lse_known ? *lse_known : LogSumExp(logits);
  std::vector<std::pair<std::int64_t, double>> out;
  out.reserve(k);
  for (std::size_t i = 0; i < k; ++i) out.emplace_back(ids[i], static_cast<double>(logits[ids[i]]) - lse);
  return out;
}

double LogprobOf(std::span<const float> logits, std::int64_t id, std::optional<double> lse) {
  return static_cast<double>(logits[static_cast<std::size_t>(id)]) - (lse ? *lse : LogSumExp(logits));
}

}  // namespace ropeserve
