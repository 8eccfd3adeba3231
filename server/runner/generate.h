// Single-sequence generation on a DecoderModel: prefill the prompt, then
// decode one token at a time with the contiguous KV cache (or, with
// use_reference, recompute the whole sequence through the reference path at
// every step). This is the offline path behind `ropeserve generate`; the
// batching engine will drive the model through StepPlans instead.
// Torch-free header.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "server/common/status.h"
#include "server/engine/sampling.h"
#include "server/service/request_params.h"  // GenerateOptions

namespace ropeserve {

class DecoderModel;

struct TokenLogprob {
  std::int64_t id;
  double logprob;
};

struct GenerateResult {
  std::vector<std::int64_t> prompt_ids;
  std::vector<std::int64_t> generated_ids;
  std::vector<double> logprobs;                         // of each generated id
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per step, when asked
  std::string finish_reason;                            // "length" | "stop"
  std::string text;            // decoded output (served requests with a tokenizer)
  std::int64_t cached_tokens = 0;  // served requests: prompt tokens found in the prefix cache
  double prefill_seconds = 0;  // prompt forward and first token
  double decode_seconds = 0;   // all later tokens
};

// Validates the prompt (non-empty, ids inside the vocabulary, prompt plus
// max_tokens within max_position_embeddings) and the options.
Status ValidateGenerateRequest(const DecoderModel& model, const std::vector<std::int64_t>& prompt_ids,
                               const GenerateOptions& options);

// `on_token`, if set, is called after each generated token (for streaming).
StatusOr<GenerateResult> Generate(const DecoderModel& model, const std::vector<std::int64_t>& prompt_ids,
                                  const GenerateOptions& options,
                                  const std::function<void(std::int64_t)>& on_token = nullptr);

}  // namespace ropeserve
