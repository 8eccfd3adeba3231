// Request parameters: one set of defaults and limits, one validator, for
// every transport. REST, gRPC and the CLI each read their wire format into
// the *Fields structs below (an unset field stays nullopt) and call
// Validate*; what comes back is what the services run. docs/api.md
// ("Defaults and limits") documents every number here.
//
// Errors name the offending field in Status::param() (OpenAI's `param`).
// Torch-free and network-free (the fuzz targets link it alone).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/common/status.h"
#include "server/common/trace_context.h"
#include "server/qa/span_scoring.h"
#include "server/qa/windows.h"
#include "server/sampler/sampling.h"
#include "server/structured/constraint.h"

namespace ropeserve {

// One generation's options, validated (the engine's and the output
// processor's view of a request).
struct GenerateOptions {
  std::int64_t max_tokens = 16;
  std::int64_t min_tokens = 0;  // EOS and stop ids/strings are ignored before this many tokens
  SamplingParams sampling;
  std::size_t top_logprobs = 0;  // 0 = none
  bool ignore_eos = false;
  // Speculative proposals allowed when the server speculates (the output
  // is the same either way).
  bool speculative = true;
  // Served requests only (need the tokenizer): generation ends when the
  // decoded text contains one of `stop` (the text is cut before it) or a
  // token of `stop_token_ids` is produced.
  std::vector<std::string> stop;
  std::vector<std::int64_t> stop_token_ids;
  // The stop string that ended the text stays in it (vLLM's
  // include_stop_str_in_output; nothing is then held back while streaming).
  bool include_stop_str_in_output = false;
  // The text leaves out special tokens (false: they are decoded too, as
  // vLLM's skip_special_tokens=false).
  bool skip_special_tokens = true;
  // Only these token ids may be generated (vLLM's allowed_token_ids;
  // sorted, distinct; empty = every token).
  std::vector<std::int64_t> allowed_token_ids;
  // Words that are never generated (vLLM's bad_words): the service turns
  // each into token sequences and bans a sequence's last token where the
  // output ends with the rest of it.
  std::vector<std::string> bad_words;
  // Added to the logits of these token ids before sampling (OpenAI's
  // logit_bias: -100 bans a token, 100 all but forces it); logprobs are
  // still those of the model's raw logits.
  std::vector<std::pair<std::int64_t, float>> logit_bias;
  // Logprobs of the prompt's tokens after the first, with this many
  // alternatives (vLLM's prompt_logprobs; OpenAI's echo with logprobs).
  std::optional<std::size_t> prompt_logprobs;
  // Structured output: every choice's text is in this language (JSON
  // Schema, any JSON object, a regex, a choice list), enforced by masking
  // logits while decoding (server/structured/).
  structured::Constraint constraint;
  // Scheduling priority: lower values are admitted first and preempted
  // last (vLLM's convention); 0 by default.
  int priority = 0;
  // Served requests: the engine ends the request with DeadlineExceeded this
  // long after submission (0 = no deadline).
  double timeout_seconds = 0;
  // The request's trace (its front end's server span): the engine's spans
  // (queue, prefill, decode) are recorded under it.
  TraceContext trace;
};

struct TokenLogprob {
  std::int64_t id;
  double logprob;
};

// A whole generation, as the offline path and unary requests return it.
struct GenerateResult {
  std::vector<std::int64_t> prompt_ids;
  std::vector<std::int64_t> generated_ids;
  std::vector<double> logprobs;                         // of each generated id
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per step, when asked
  std::vector<double> prompt_logprobs;                  // of prompt tokens 1.., when asked
  std::vector<std::int64_t> prompt_ranks;               // their ranks (1 = the likeliest token)
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;
  std::string finish_reason;       // "length" | "stop"
  std::string stop_string;         // the stop string that ended the text, if one did (vLLM's stop_reason)
  std::string text;                // decoded output (with a tokenizer)
  std::int64_t cached_tokens = 0;  // prompt tokens found in the prefix cache
  double prefill_seconds = 0;      // submission to the first token
  double decode_seconds = 0;       // all later tokens
};

}  // namespace ropeserve

namespace ropeserve::service {

// Temperatures below this are greedy (vLLM's _SAMPLING_EPS): logits
// divided by a vanishing temperature overflow and the probabilities
// become NaN.
constexpr double kGreedyTemperature = 1e-5;

// Fixed limits (not flags): what one request may ask for.
constexpr int kMaxPrompts = 64;    // prompts in one completions request
constexpr int kMaxChoices = 16;    // n
constexpr int kMaxSequences = 64;  // prompts x n
constexpr int kMaxStopStrings = 16;
constexpr std::size_t kMaxStopStringBytes = 256;
constexpr int kMaxStopTokenIds = 64;
constexpr int kMaxTopLogprobs = 20;
constexpr int kMaxLogitBias = 1024;
constexpr int kMaxBadWords = 128;                // bad_words (vLLM's GPU worker's limit)
constexpr std::size_t kMaxBadWordTokens = 1024;  // their tokens, all sequences together (the same)
// allowed_token_ids: at most this many ids (more is refused, whatever the
// vocabulary; a client wanting more than a million tokens wants them all).
constexpr std::size_t kMaxAllowedTokenIds = 1 << 20;
constexpr std::size_t kMaxGuidedRegexBytes = 4096;  // guided_regex / OutputConstraint.regex
constexpr std::size_t kMaxGuidedChoices = 1024;     // guided_choice / OutputConstraint.choice
constexpr int kMaxPriority = 1000;                  // |priority| (vLLM's scheduling priority)
// Batch lines (server/batch/): below every priority a request may ask for,
// so the scheduler admits them last and preempts them first.
constexpr int kBatchPriority = kMaxPriority + 1;
constexpr double kMaxAbsLogitBias = 100;  // bias values lie in [-100, 100] (OpenAI)
constexpr int kMaxMessages = 1024;        // chat messages
constexpr int kMaxContentParts = 256;     // content parts of one chat message
constexpr int kMaxQaInputs = 64;          // (question, context) pairs of one QA request
constexpr int kMaxQaTopK = 100;
constexpr int kMaxQaAnswerLen = 4096;
constexpr int kMaxQaNBest = 1000;
constexpr int kMaxQaPassages = 256;  // passages ("contexts") of one question

// The server's limits that depend on its model and flags.
struct Limits {
  std::int64_t max_model_len = 0;  // prompt + generated tokens of one sequence
  std::int64_t vocab_size = 0;     // token ids must be below this
  // Tokens one request may reserve: the sum over its sequences (prompts x
  // n) of prompt + max_tokens (serve --max-request-tokens; by default the
  // KV cache's capacity). 0 = no limit.
  std::int64_t max_request_tokens = 0;
  // Whether requests may set a scheduling priority (serve
  // --scheduling-policy priority); off, a non-zero priority is refused:
  // letting any client jump the queue is the operator's choice.
  bool priority_scheduling = false;
  // Longest text /v1/summarize and gRPC Summarize* accept (serve
  // --max-document-bytes); longer: 413 / RESOURCE_EXHAUSTED.
  std::size_t max_document_bytes = 1 << 20;
};

// The endpoint a request came through: it decides the defaults.
enum class Endpoint {
  kCompletions,  // POST /v1/completions: temperature 1, max_tokens 16 (OpenAI)
  kChat,         // POST /v1/chat/completions: temperature 1, max_tokens = the rest of the context (vLLM)
  kSummarize,    // /v1/summarize and gRPC Summarize*: greedy, max_tokens min(256, the rest)
  kGenerate,     // gRPC Generate and `ropeserve generate`: greedy, max_tokens 16
};

// What a transport read; nullopt = not given (the endpoint's default).
struct GenerationFields {
  std::optional<std::int64_t> max_tokens;
  std::optional<std::int64_t> min_tokens;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<std::int64_t> top_k;  // -1 or 0 = all tokens
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<double> frequency_penalty;
  std::optional<double> presence_penalty;
  std::optional<std::uint64_t> seed;
  std::optional<bool> ignore_eos;
  std::optional<bool> speculative;  // unset: true
  std::vector<std::string> stop;
  std::vector<std::int64_t> stop_token_ids;
  std::optional<bool> include_stop_str_in_output;
  std::optional<bool> skip_special_tokens;
  std::optional<std::vector<std::int64_t>> allowed_token_ids;  // given: not empty
  std::vector<std::string> bad_words;
  std::optional<std::int64_t> top_logprobs;  // alternatives per token (0 = the chosen token's logprob only)
  std::optional<std::int64_t> n;
  std::vector<std::pair<std::int64_t, double>> logit_bias;  // (token id, bias)
  std::optional<std::int64_t> priority;                     // lower runs first; [-kMaxPriority, kMaxPriority]
  std::optional<std::int64_t> prompt_logprobs;              // alternatives per prompt token (0-20)
  // Only the prompt's last k tokens are kept (vLLM's truncate_prompt_tokens;
  // -1 = the context length): applied by PrepareGeneration, before
  // ValidateGeneration sees the prompts' lengths.
  std::optional<std::int64_t> truncate_prompt_tokens;
  // The server's own priority for the request, which wins over `priority`;
  // never read from a request (batch lines run at kBatchPriority).
  std::optional<int> server_priority;
  structured::Constraint constraint;  // kNone: free text
};

// What a transport read for /v1/summarize and gRPC Summarize*.
struct SummaryFields {
  std::string text;
  std::string instruction;                       // "" = the style's instruction
  std::optional<std::string> strategy;           // "auto" | "truncate" | "map_reduce" | "refine"
  std::optional<std::string> style;              // "paragraph" | "bullets" | "headline"
  std::string focus;                             // a topic or question to favour
  std::string language;                          // e.g. "French"
  std::optional<std::int64_t> chunk_tokens;      // document tokens per chunk
  std::optional<std::int64_t> chunk_overlap;     // tokens shared by consecutive chunks
  std::optional<std::int64_t> chunk_max_tokens;  // tokens of each intermediate summary
};

// Fixed limits of document summaries (server/service/document_summary.h).
constexpr int kMaxDocumentChunks = 512;
constexpr std::size_t kMaxSummaryFieldBytes = 1024;  // focus, language

class ValidatedGeneration;

// Defaults, ranges and caps of one generation request whose prompts have
// `prompt_lengths` tokens (already tokenized; each >= 1). `timeout_seconds`
// is the server's --request-timeout or a shorter client deadline.
StatusOr<ValidatedGeneration> ValidateGeneration(const GenerationFields& fields, Endpoint endpoint,
                                                 const std::vector<std::size_t>& prompt_lengths, const Limits& limits,
                                                 double timeout_seconds = 0);

// A generation's options as ValidateGeneration made them, and the only
// thing GenerationService::Start / StartN / Generate* take: a caller cannot
// hand the engine options that skipped the validator, so nothing below it
// re-checks a client's values (the service and the engine only assert,
// answering an internal error). Copyable; the derivations below keep what
// was validated (a seed offset wraps, a trace is not a client value).
class ValidatedGeneration {
 public:
  // The same for every prompt and choice (choice i's seed is seed + i).
  const GenerateOptions& options() const { return options_; }
  int n() const { return n_; }  // choices per prompt
  // The longest prompt the options were validated for: Start refuses an
  // empty or longer one (max_tokens was bounded by the room it leaves).
  std::size_t longest_prompt() const { return longest_prompt_; }

  // Choice i (0-based) of n: the seed + i; prompt logprobs on choice 0 only
  // (the others may take the prompt from the prefix cache).
  ValidatedGeneration Choice(int i) const;
  // Prompt i of a batch run with seed offsets: the seed + i.
  ValidatedGeneration WithSeedOffset(std::uint64_t i) const;
  // The request's trace (the engine's spans go under it).
  ValidatedGeneration WithTrace(const TraceContext& trace) const;

 private:
  friend StatusOr<ValidatedGeneration> ValidateGeneration(const GenerationFields&, Endpoint,
                                                          const std::vector<std::size_t>&, const Limits&, double);
  ValidatedGeneration() = default;

  GenerateOptions options_;
  int n_ = 1;
  std::size_t longest_prompt_ = 0;
};

// vLLM's truncate_prompt_tokens: how many of a prompt's last tokens to keep
// (nullopt: all). -1 is the context length; else 1 to the context length.
StatusOr<std::optional<std::size_t>> PromptTruncation(const GenerationFields& fields, const Limits& limits);

// Token-id prompts: non-empty, every id in [0, vocab_size). `param` names
// the field in errors ("prompt", "prompt_ids").
Status ValidatePromptIds(const std::vector<std::int64_t>& ids, const Limits& limits, const std::string& param);

// What a QA request may set (Hugging Face pipeline names).
struct QaFields {
  std::optional<std::int64_t> top_k;
  std::optional<std::int64_t> max_answer_len;
  std::optional<std::int64_t> max_seq_len;
  std::optional<std::int64_t> doc_stride;
  std::optional<std::int64_t> max_question_len;
  std::optional<std::int64_t> n_best_size;
  std::optional<bool> handle_impossible_answer;
  std::optional<bool> align_to_words;
  std::optional<double> null_score_diff_threshold;
  std::optional<std::string> scoring;      // "pipeline" | "logits"
  std::optional<std::string> offset_unit;  // "code_point" | "utf16" | "utf8_byte"
};

struct ValidatedQa {
  qa::WindowOptions windows;
  qa::QaOptions options;
  qa::OffsetUnit offset_unit = qa::OffsetUnit::kCodePoint;
};

// One passage of a multi-passage question ("contexts").
struct QaPassage {
  std::optional<std::string> id;  // the caller's id, returned with its answers
  bool id_is_number = false;      // it was an integer (returned as one)
  std::string text;
};

// Defaults (top_k 1, max_answer_len 15, max_seq_len 384, doc_stride
// min(max_seq_len / 2, 128), max_question_len 64, n_best_size 20, pipeline
// scoring) and ranges; doc_stride at most max_seq_len / 2.
// `max_position_embeddings` bounds max_seq_len. The QA service adds its
// context-size and window-count limits (serve --qa-max-context-bytes,
// --qa-max-windows).
StatusOr<ValidatedQa> ValidateQa(const QaFields& fields, std::int64_t max_position_embeddings);

}  // namespace ropeserve::service
