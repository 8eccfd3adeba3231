// Token selection from one row of logits, on the host, torch-free. This is
// the reference sampler: simple, exact, and the oracle for any device-side
// sampler added later.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "server/common/status.h"
#include "server/common/token_id.h"
#include "server/engine/types.h"

namespace ropeserve {

// One draw's result: the token, its logprob and the alternatives asked for.
struct SampledToken {
  RequestId id = 0;
  TokenId token = 0;
  double logprob = 0;                           // under log_softmax of the raw logits
  std::vector<std::pair<TokenId, double>> top;  // the top_logprobs most likely, when asked
};

struct SamplingParams {
  double temperature = 0.0;  // 0 = greedy (argmax, ties -> lowest id)
  std::int64_t top_k = 0;    // 0 or -1 = disabled
  double top_p = 1.0;        // (0, 1]
  double min_p = 0.0;        // [0, 1]
  std::optional<std::uint64_t> seed;
  // Penalties, with vLLM's semantics, applied to the logits before
  // temperature and truncation (greedy included):
  //   repetition: logit / p if positive, logit * p if not, for every token
  //               seen in the prompt or the output (1 = off, > 0);
  //   frequency:  logit -= f * (times the token was generated) ([-2, 2]);
  //   presence:   logit -= p if the token was generated at all ([-2, 2]).
  double repetition_penalty = 1.0;
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;

  // Checks ranges; the message names the offending field.
  Status Validate() const;
  bool greedy() const { return temperature == 0.0; }
  bool has_penalties() const {
    return repetition_penalty != 1.0 || frequency_penalty != 0.0 || presence_penalty != 0.0;
  }
};

// A processor's effect on one row, stated as data that a device applies
// without the row leaving it: `bias` is added (its ids distinct), then,
// when `masked`, every token outside the allowed set becomes -inf (the
// allowed set is `ids`, or everything but `ids` when !allow_list; ids past
// the row are ignored). As vLLM's logit-bias tensors and xgrammar's token
// bitmask.
struct LogitsEdit {
  std::vector<std::pair<TokenId, float>> bias;
  bool masked = false;
  bool allow_list = true;
  std::span<const TokenId> ids;      // sorted; alive while `keep` is
  std::shared_ptr<const void> keep;  // owns `ids`' memory
  // The edit on a host row: the reference for a device's.
  void ApplyTo(std::span<float> logits) const;
};

// Sets every logit outside the allowed set to -inf: the allowed set is
// `ids` (sorted), or everything but `ids` when !allow_list; ids past the
// row are ignored. A grammar's TokenMask and a LogitsEdit both apply so.
void ApplyTokenMask(std::span<float> logits, bool allow_list, std::span<const TokenId> ids);

// A per-request hook on the logits before sampling (a grammar's mask, say):
// called on the runner's thread with the tokens the request generated so
// far; it may lower logits to -inf. Logprobs are reported from the raw
// logits, as the reference servers do by default.
class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  virtual void Process(std::span<const TokenId> generated, std::span<float> logits) = 0;
  // Whether Describe can state this processor's effect; false (the
  // default) keeps its rows on the host sampler.
  virtual bool Describable() const { return false; }
  // What Process(generated, row) would do to any row, as an edit (when
  // Describable): called instead of Process, on the same thread.
  virtual void Describe(std::span<const TokenId> generated, LogitsEdit& edit);
};

// What the penalties look at: how often each token was generated, and which
// tokens the prompt holds (only kept when repetition_penalty is set).
struct PenaltyState {
  std::unordered_map<std::int64_t, std::int64_t> output_counts;
  std::unordered_set<std::int64_t> prompt_tokens;
};

// Applies the penalties of `params` to `logits` in place.
void ApplyPenalties(std::span<float> logits, const SamplingParams& params, const PenaltyState& state);

// Per-request random state (seeded from SamplingParams::seed when given).
using SamplerRng = std::mt19937_64;

// Picks a token id from `logits` ([vocab]).
std::int64_t SampleToken(std::span<const float> logits, const SamplingParams& params, SamplerRng& rng);

// One generation step of a request: with penalties, they are applied to a
// copy of `logits` in `scratch` (the caller's logits, and so logprobs, stay
// raw) and the chosen token is counted in `state` for the next steps.
std::int64_t SampleStep(std::span<const float> logits, const SamplingParams& params, PenaltyState& state,
                        std::vector<float>& scratch, SamplerRng& rng);

// log(sum(exp(logits))), in double (the slow path: executors usually
// supply it, see StepLogits::logsumexp).
double LogSumExp(std::span<const float> logits);

// The k most likely ids under log_softmax(logits) (raw logits, before
// temperature, as OpenAI-style logprobs report), most likely first; ties by
// lower id. `lse`: LogSumExp(logits) when known.
std::vector<std::pair<std::int64_t, double>> TopLogprobs(std::span<const float> logits, std::size_t k,
                                                         std::optional<double> lse = std::nullopt);

// log_softmax(logits)[id] = logits[id] - lse.
double LogprobOf(std::span<const float> logits, std::int64_t id, std::optional<double> lse = std::nullopt);

}  // namespace ropeserve
