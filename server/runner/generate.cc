#include "server/runner/generate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <span>

#include "server/models/decoder.h"

namespace ropeserve {

Status ValidateGenerateRequest(const DecoderModel& model, const std::vector<std::int64_t>& prompt_ids,
                               const GenerateOptions& options) {
  const ModelConfig& c = model.config();
  if (prompt_ids.empty()) return InvalidArgument("the prompt is empty");
  for (std::size_t i = 0; i < prompt_ids.size(); ++i) {
    if (prompt_ids[i] < 0 || prompt_ids[i] >= c.vocab_size)
      return InvalidArgument("prompt token " + std::to_string(i) + " has id " + std::to_string(prompt_ids[i]) +
                             ", outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  }
  if (options.max_tokens < 1) return InvalidArgument("max_tokens must be at least 1");
  const auto total = static_cast<std::int64_t>(prompt_ids.size()) + options.max_tokens;
  if (total > c.max_position_embeddings)
    return InvalidArgument("this model's maximum context length is " + std::to_string(c.max_position_embeddings) +
                           " tokens, but " + std::to_string(prompt_ids.size()) + " prompt tokens + " +
                           std::to_string(options.max_tokens) + " max_tokens were requested");
  if (options.top_logprobs > 20) return InvalidArgument("top_logprobs must be at most 20");
  if (options.min_tokens < 0 || options.min_tokens > options.max_tokens)
    return InvalidArgument("min_tokens must be between 0 and max_tokens");
  return options.sampling.Validate();
}

StatusOr<GenerateResult> Generate(const DecoderModel& model, const std::vector<std::int64_t>& prompt_ids,
                                  const GenerateOptions& options, const std::function<void(std::int64_t)>& on_token) {
  RS_RETURN_IF_ERROR(ValidateGenerateRequest(model, prompt_ids, options));
  const auto& eos = model.config().eos_token_ids;
  GenerateResult result;
  result.prompt_ids = prompt_ids;
  result.finish_reason = "length";
  SamplerRng rng(options.sampling.seed.value_or(std::random_device{}()));
  PenaltyState penalties;
  if (options.sampling.repetition_penalty != 1.0) penalties.prompt_tokens.insert(prompt_ids.begin(), prompt_ids.end());
  std::vector<float> penalized;

  std::vector<std::int64_t> sequence = prompt_ids;
  ContiguousKvCache cache;
  at::Tensor logits;  // [1, V] float32 for the next token
  auto ids_tensor = [](const std::vector<std::int64_t>& v) {
    return at::tensor(v, at::TensorOptions().dtype(at::kLong));
  };
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto first_token_done = start;
  if (!options.use_reference) logits = model.ForwardIncremental(ids_tensor(prompt_ids), cache, false);

  for (std::int64_t step = 0; step < options.max_tokens; ++step) {
    if (options.use_reference) logits = model.ForwardReference(ids_tensor(sequence)).narrow(0, sequence.size() - 1, 1);
    at::Tensor row = logits.reshape({-1}).contiguous();
    std::span<const float> view(row.data_ptr<float>(), static_cast<std::size_t>(row.numel()));
    const std::int64_t next = SampleStep(view, options.sampling, penalties, penalized, rng);
    result.generated_ids.push_back(next);
    // log-sum-exp vectorized in float32, as the engine's runner computes it.
    const double lse = at::logsumexp(row, 0).item<float>();
    result.logprobs.push_back(LogprobOf(view, next, lse));
    if (options.top_logprobs > 0) {
      std::vector<TokenLogprob> top;
      for (auto [id, lp] : TopLogprobs(view, options.top_logprobs, lse)) top.push_back({id, lp});
      result.top_logprobs.push_back(std::move(top));
    }
    sequence.push_back(next);
    if (step == 0) first_token_done = Clock::now();
    if (on_token) on_token(next);
    const bool may_stop = step + 1 >= options.min_tokens;
    const bool stop_id = std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(), next) !=
                         options.stop_token_ids.end();
    if (may_stop && (stop_id || (!options.ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end()))) {
      result.finish_reason = "stop";
      break;
    }
    if (step + 1 < options.max_tokens && !options.use_reference)
      logits = model.ForwardIncremental(ids_tensor({next}), cache, false);
  }
  result.prefill_seconds = std::chrono::duration<double>(first_token_done - start).count();
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - first_token_done).count();
  return result;
}

}  // namespace ropeserve
