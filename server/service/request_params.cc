#include "server/service/request_params.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ropeserve::service {

namespace {

// OpenAI's error code for a request that does not fit the context.
constexpr const char* kContextLengthExceeded = "context_length_exceeded";

Status Bad(const std::string& param, const std::string& message) { return InvalidArgument(message).WithParam(param); }

// `name` in [lo, hi] when given.
// The guided-decoding limits, one place for every transport: the readers
// (REST, gRPC) only check the shape of what they read.
Status CheckConstraint(const structured::Constraint& c) {
  using K = structured::Constraint::Kind;
  if (c.kind == K::kRegex && (c.text.empty() || c.text.size() > kMaxGuidedRegexBytes))
    return Bad(c.param, "'" + c.param + "' must be a regular expression of 1 to " +
                            std::to_string(kMaxGuidedRegexBytes) + " bytes");
  if (c.kind == K::kChoice) {
    if (c.choices.empty() || c.choices.size() > kMaxGuidedChoices)
      return Bad(c.param,
                 "'" + c.param + "' must hold 1 to " + std::to_string(kMaxGuidedChoices) + " non-empty strings");
    for (const std::string& x : c.choices)
      if (x.empty()) return Bad(c.param, "'" + c.param + "' must hold non-empty strings");
  }
  return Status::Ok();
}

Status CheckRange(const std::optional<std::int64_t>& v, std::int64_t lo, std::int64_t hi, const std::string& name) {
  if (v && (*v < lo || *v > hi))
    return Bad(name, "'" + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return Status::Ok();
}

struct EndpointDefaults {
  double temperature;
  std::int64_t max_tokens;      // 0 = the rest of the context
  std::int64_t max_tokens_cap;  // for the "rest of the context" default; 0 = none
};

EndpointDefaults DefaultsFor(Endpoint e) {
  switch (e) {
    case Endpoint::kCompletions:
      return {1.0, 16, 0};
    case Endpoint::kChat:
      return {1.0, 0, 0};
    case Endpoint::kSummarize:
      return {0.0, 0, 256};
    case Endpoint::kGenerate:
      return {0.0, 16, 0};
  }
  return {0.0, 16, 0};
}

// Stop strings and ids, and which tokens may be generated.
Status ValidateStopsAndTokens(const GenerationFields& f, const Limits& limits, GenerateOptions& o) {
  if (f.stop.size() > static_cast<std::size_t>(kMaxStopStrings))
    return Bad("stop", "'stop' may hold at most " + std::to_string(kMaxStopStrings) + " strings");
  for (const auto& st : f.stop) {
    if (st.empty()) return Bad("stop", "'stop' strings must not be empty");
    if (st.size() > kMaxStopStringBytes)
      return Bad("stop", "'stop' strings may be at most " + std::to_string(kMaxStopStringBytes) + " bytes long");
  }
  o.stop = f.stop;
  if (f.stop_token_ids.size() > static_cast<std::size_t>(kMaxStopTokenIds))
    return Bad("stop_token_ids", "'stop_token_ids' may hold at most " + std::to_string(kMaxStopTokenIds) + " ids");
  for (std::int64_t id : f.stop_token_ids) {
    if (id < 0 || id >= limits.vocab_size)
      return Bad("stop_token_ids", "stop token id " + std::to_string(id) + " is outside the vocabulary");
  }
  o.stop_token_ids = f.stop_token_ids;
  o.include_stop_str_in_output = f.include_stop_str_in_output.value_or(false);
  o.skip_special_tokens = f.skip_special_tokens.value_or(true);
  if (f.allowed_token_ids) {
    const std::vector<std::int64_t>& ids = *f.allowed_token_ids;
    if (ids.empty()) return Bad("allowed_token_ids", "'allowed_token_ids' must not be empty");
    if (ids.size() > kMaxAllowedTokenIds)
      return Bad("allowed_token_ids",
                 "'allowed_token_ids' may hold at most " + std::to_string(kMaxAllowedTokenIds) + " ids");
    for (std::int64_t id : ids) {
      if (id < 0 || id >= limits.vocab_size)
        return Bad("allowed_token_ids", "allowed token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                            std::to_string(limits.vocab_size) + ")");
    }
    o.allowed_token_ids = ids;
    std::sort(o.allowed_token_ids.begin(), o.allowed_token_ids.end());
    o.allowed_token_ids.erase(std::unique(o.allowed_token_ids.begin(), o.allowed_token_ids.end()),
                              o.allowed_token_ids.end());
  }
  if (f.bad_words.size() > static_cast<std::size_t>(kMaxBadWords))
    return Bad("bad_words", "'bad_words' may hold at most " + std::to_string(kMaxBadWords) + " words");
  for (const auto& w : f.bad_words) {
    // vLLM strips the word's leading whitespace: what is left must be a word.
    if (w.find_first_not_of(" \t\n\r\f\v") == std::string::npos)
      return Bad("bad_words", "'bad_words' must hold words that are not empty or whitespace");
    if (w.size() > kMaxStopStringBytes)
      return Bad("bad_words", "'bad_words' may be at most " + std::to_string(kMaxStopStringBytes) + " bytes long");
  }
  o.bad_words = f.bad_words;
  return Status::Ok();
}

}  // namespace

StatusOr<std::optional<std::size_t>> PromptTruncation(const GenerationFields& f, const Limits& limits) {
  if (!f.truncate_prompt_tokens) return std::optional<std::size_t>();
  const std::int64_t k = *f.truncate_prompt_tokens == -1 ? limits.max_model_len : *f.truncate_prompt_tokens;
  if (k < 1 || k > limits.max_model_len)
    return Bad("truncate_prompt_tokens", "'truncate_prompt_tokens' must be -1 (the context length) or between 1 and " +
                                             std::to_string(limits.max_model_len));
  return std::optional<std::size_t>(static_cast<std::size_t>(k));
}

Status ValidatePromptIds(const std::vector<std::int64_t>& ids, const Limits& limits, const std::string& param) {
  if (ids.empty()) return Bad(param, "the prompt is empty");
  for (std::int64_t id : ids) {
    if (id < 0 || id >= limits.vocab_size)
      return Bad(param, "prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(limits.vocab_size) + ")");
  }
  return Status::Ok();
}

StatusOr<ValidatedGeneration> ValidateGeneration(const GenerationFields& f, Endpoint endpoint,
                                                 const std::vector<std::size_t>& prompt_lengths, const Limits& limits,
                                                 double timeout_seconds) {
  const EndpointDefaults d = DefaultsFor(endpoint);
  ValidatedGeneration out;
  GenerateOptions& o = out.options_;

  // Sequences: prompts x n.
  if (prompt_lengths.empty()) return Bad("prompt", "a prompt is required");
  if (prompt_lengths.size() > static_cast<std::size_t>(kMaxPrompts))
    return Bad("prompt", "at most " + std::to_string(kMaxPrompts) + " prompts per request");
  RS_RETURN_IF_ERROR(CheckRange(f.n, 1, kMaxChoices, "n"));
  out.n_ = static_cast<int>(f.n.value_or(1));
  const auto sequences = static_cast<std::int64_t>(prompt_lengths.size()) * out.n_;
  if (sequences > kMaxSequences)
    return Bad("n", "prompts x n must be at most " + std::to_string(kMaxSequences) + " (got " +
                        std::to_string(prompt_lengths.size()) + " x " + std::to_string(out.n_) + ")");
  std::size_t longest = 0;
  std::int64_t prompt_tokens = 0;
  for (std::size_t len : prompt_lengths) {
    if (len == 0) return Bad("prompt", "a prompt tokenizes to no tokens");
    longest = std::max(longest, len);
    prompt_tokens += static_cast<std::int64_t>(len) * out.n_;
  }
  out.longest_prompt_ = longest;
  const std::int64_t room = limits.max_model_len - static_cast<std::int64_t>(longest);
  if (room < 1)
    return Bad("prompt", "the prompt has " + std::to_string(longest) + " tokens; the context length is " +
                             std::to_string(limits.max_model_len) + " (prompt + at least one generated token)")
        .WithReason(kContextLengthExceeded);

  // max_tokens: given, or the endpoint's default, bounded by the context and
  // by the tokens one request may reserve.
  // Beyond the room left (the context included) is OpenAI's
  // context_length_exceeded, whatever the number.
  RS_RETURN_IF_ERROR(CheckRange(f.max_tokens, 1, std::numeric_limits<std::int64_t>::max(), "max_tokens"));
  if (f.max_tokens && *f.max_tokens > room)
    return Bad("max_tokens", "'max_tokens' " + std::to_string(*f.max_tokens) + " plus the prompt's " +
                                 std::to_string(longest) + " tokens exceed the context length " +
                                 std::to_string(limits.max_model_len))
        .WithReason(kContextLengthExceeded);
  std::int64_t budget_room = room;  // per sequence, under --max-request-tokens
  if (limits.max_request_tokens > 0) {
    budget_room = (limits.max_request_tokens - prompt_tokens) / sequences;
    if (budget_room < 1)
      return Bad("prompt", "the request's " + std::to_string(sequences) + " sequences with " +
                               std::to_string(prompt_tokens) + " prompt tokens exceed the server's limit of " +
                               std::to_string(limits.max_request_tokens) + " tokens per request");
  }
  if (f.max_tokens) {
    o.max_tokens = *f.max_tokens;
    if (limits.max_request_tokens > 0 && o.max_tokens > budget_room)
      return Bad("max_tokens",
                 "prompts x n x (prompt + max_tokens) = " + std::to_string(prompt_tokens + o.max_tokens * sequences) +
                     " tokens exceed the server's limit of " + std::to_string(limits.max_request_tokens) +
                     " tokens per request");
  } else {
    o.max_tokens = d.max_tokens > 0 ? d.max_tokens : room;
    if (d.max_tokens_cap > 0) o.max_tokens = std::min(o.max_tokens, d.max_tokens_cap);
    o.max_tokens = std::max<std::int64_t>(1, std::min({o.max_tokens, room, budget_room}));
  }
  RS_RETURN_IF_ERROR(CheckRange(f.min_tokens, 0, o.max_tokens, "min_tokens"));
  o.min_tokens = f.min_tokens.value_or(0);

  // Sampling.
  SamplingParams& s = o.sampling;
  s.temperature = f.temperature.value_or(d.temperature);
  if (!std::isfinite(s.temperature) || s.temperature < 0)
    return Bad("temperature", "'temperature' must be a finite number >= 0");
  if (s.temperature < kGreedyTemperature) s.temperature = 0;  // greedy
  if (f.top_p) s.top_p = *f.top_p;
  if (f.top_k) s.top_k = *f.top_k == -1 ? 0 : *f.top_k;
  if (f.min_p) s.min_p = *f.min_p;
  if (f.repetition_penalty) s.repetition_penalty = *f.repetition_penalty;
  if (f.frequency_penalty) s.frequency_penalty = *f.frequency_penalty;
  if (f.presence_penalty) s.presence_penalty = *f.presence_penalty;
  s.seed = f.seed;
  if (Status v = s.Validate(); !v.ok()) {
    // The message starts with the field's name.
    const std::string& m = v.message();
    return Bad(m.substr(0, m.find(' ')), "'" + m.substr(0, m.find(' ')) + "'" + m.substr(m.find(' ')));
  }
  o.ignore_eos = f.ignore_eos.value_or(false);
  o.speculative = f.speculative.value_or(true);

  RS_RETURN_IF_ERROR(ValidateStopsAndTokens(f, limits, o));
  RS_RETURN_IF_ERROR(CheckRange(f.priority, -kMaxPriority, kMaxPriority, "priority"));
  o.priority = static_cast<int>(f.priority.value_or(0));
  if (o.priority != 0 && !limits.priority_scheduling)
    return Bad("priority", "'priority' needs a server started with --scheduling-policy priority");
  if (f.server_priority) o.priority = *f.server_priority;
  if (f.logit_bias.size() > static_cast<std::size_t>(kMaxLogitBias))
    return Bad("logit_bias", "'logit_bias' may hold at most " + std::to_string(kMaxLogitBias) + " entries");
  for (auto [id, bias] : f.logit_bias) {
    if (id < 0 || id >= limits.vocab_size)
      return Bad("logit_bias", "logit_bias token id " + std::to_string(id) + " is outside the vocabulary");
    if (!(bias >= -kMaxAbsLogitBias && bias <= kMaxAbsLogitBias))
      return Bad("logit_bias", "logit_bias values must be between -100 and 100");
    o.logit_bias.emplace_back(id, static_cast<float>(bias));
  }

  // Structured output must be able to end: the grammar decides when EOS
  // comes, so neither ignore_eos nor min_tokens may overrule it.
  if (!f.constraint.empty()) {
    RS_RETURN_IF_ERROR(CheckConstraint(f.constraint));
    const std::string& param = f.constraint.param.empty() ? std::string("response_format") : f.constraint.param;
    if (o.ignore_eos) return Bad("ignore_eos", "'ignore_eos' cannot be combined with '" + param + "'");
    if (o.min_tokens > 0) return Bad("min_tokens", "'min_tokens' cannot be combined with '" + param + "'");
    // Their masks and the grammar's could leave no token to choose.
    if (!o.allowed_token_ids.empty())
      return Bad("allowed_token_ids", "'allowed_token_ids' cannot be combined with '" + param + "'");
    if (!o.bad_words.empty()) return Bad("bad_words", "'bad_words' cannot be combined with '" + param + "'");
    o.constraint = f.constraint;
  }

  RS_RETURN_IF_ERROR(CheckRange(f.top_logprobs, 0, kMaxTopLogprobs, "top_logprobs"));
  RS_RETURN_IF_ERROR(CheckRange(f.prompt_logprobs, 0, kMaxTopLogprobs, "prompt_logprobs"));
  if (f.prompt_logprobs) o.prompt_logprobs = static_cast<std::size_t>(*f.prompt_logprobs);
  o.top_logprobs = static_cast<std::size_t>(f.top_logprobs.value_or(0));
  if (!std::isfinite(timeout_seconds) || timeout_seconds < 0)
    return Bad("timeout", "the request timeout must be a finite number >= 0");
  o.timeout_seconds = std::min(timeout_seconds, 1e7);
  return out;
}

ValidatedGeneration ValidatedGeneration::Choice(int i) const {
  ValidatedGeneration c = WithSeedOffset(static_cast<std::uint64_t>(i));
  if (i > 0) c.options_.prompt_logprobs.reset();
  return c;
}

ValidatedGeneration ValidatedGeneration::WithSeedOffset(std::uint64_t i) const {
  ValidatedGeneration c = *this;
  if (c.options_.sampling.seed) c.options_.sampling.seed = *c.options_.sampling.seed + i;  // wraps, as a seed may
  return c;
}

ValidatedGeneration ValidatedGeneration::WithTrace(const TraceContext& trace) const {
  ValidatedGeneration c = *this;
  c.options_.trace = trace;
  return c;
}

StatusOr<ValidatedQa> ValidateQa(const QaFields& f, std::int64_t max_position_embeddings) {
  ValidatedQa out;
  RS_RETURN_IF_ERROR(CheckRange(f.top_k, 1, kMaxQaTopK, "top_k"));
  RS_RETURN_IF_ERROR(CheckRange(f.max_answer_len, 1, kMaxQaAnswerLen, "max_answer_len"));
  RS_RETURN_IF_ERROR(CheckRange(f.n_best_size, 1, kMaxQaNBest, "n_best_size"));
  const std::int64_t longest = std::min<std::int64_t>(max_position_embeddings, 1 << 20);
  RS_RETURN_IF_ERROR(CheckRange(f.max_seq_len, 8, longest, "max_seq_len"));
  const std::int64_t max_seq_len = f.max_seq_len.value_or(std::min<std::int64_t>(384, longest));
  RS_RETURN_IF_ERROR(CheckRange(f.max_question_len, 1, max_seq_len, "max_question_len"));
  // Windows overlap by doc_stride tokens; at most half a window, so that
  // each window brings new context (the pipeline's default is at most half).
  RS_RETURN_IF_ERROR(CheckRange(f.doc_stride, 0, max_seq_len / 2, "doc_stride"));
  out.windows.max_seq_len = static_cast<int>(max_seq_len);
  if (f.doc_stride) out.windows.doc_stride = static_cast<int>(*f.doc_stride);
  out.windows.max_question_len = static_cast<int>(f.max_question_len.value_or(std::min<std::int64_t>(64, max_seq_len)));
  qa::QaOptions& o = out.options;
  o.top_k = static_cast<int>(f.top_k.value_or(1));
  o.max_answer_len = static_cast<int>(f.max_answer_len.value_or(std::min<std::int64_t>(15, max_seq_len)));
  if (o.max_answer_len > max_seq_len) return Bad("max_answer_len", "'max_answer_len' exceeds 'max_seq_len'");
  o.n_best_size = static_cast<int>(f.n_best_size.value_or(20));
  o.handle_impossible_answer = f.handle_impossible_answer.value_or(false);
  o.align_to_words = f.align_to_words.value_or(true);
  if (f.null_score_diff_threshold) {
    if (!std::isfinite(*f.null_score_diff_threshold))
      return Bad("null_score_diff_threshold", "'null_score_diff_threshold' must be a finite number");
    o.null_score_diff_threshold = *f.null_score_diff_threshold;
  }
  const std::string scoring = f.scoring.value_or("pipeline");
  if (scoring != "pipeline" && scoring != "logits")
    return Bad("scoring", "'scoring' must be \"pipeline\" or \"logits\"");
  o.scoring = scoring == "logits" ? qa::Scoring::kLogits : qa::Scoring::kPipeline;
  const std::optional<qa::OffsetUnit> unit = qa::ParseOffsetUnit(f.offset_unit.value_or("code_point"));
  if (!unit) return Bad("offset_unit", "'offset_unit' must be \"code_point\", \"utf16\" or \"utf8_byte\"");
  out.offset_unit = *unit;
  return out;
}

}  // namespace ropeserve::service
