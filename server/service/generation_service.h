// The generation service: what every transport (REST, gRPC) and the CLI
// call to run a decoder request. It turns validated GenerateOptions into an
// engine request, submits it, and hands back a Generation (the output
// processor, server/service/generation.h). It owns the engine and the
// model executor it is given (the runner; ServeDecoder in
// server/serving/service_factory.h builds both from a checkpoint), so it
// stays torch-free.
//
// Two ways to run the engine: its own thread (serving: Start/Collect from
// any thread), or stepped on the caller's thread (offline: `ropeserve
// generate`, tests; Generate and GenerateBatch step it until their
// requests end). Thread-safety: all methods may be called from any thread;
// an offline service from one thread at a time.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/checkpoint/model_config.h"
#include "server/engine/engine.h"
#include "server/engine/kv_cache_sizing.h"
#include "server/service/generation.h"
#include "server/service/request_params.h"
#include "server/service/tool_calls.h"
#include "server/template/chat_template.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve::structured {
class CompiledGrammar;
class GrammarCompiler;
}  // namespace ropeserve::structured

namespace ropeserve::service {

// What requests may ask of the service (serve's request-limit flags): the
// same struct in EngineOptions and GenerationServiceConfig; the service
// turns it into the validator's Limits (request_params.h).
struct RequestLimitOptions {
  // Tokens one request may reserve over all its sequences (serve
  // --max-request-tokens); 0 = the KV cache's capacity.
  std::int64_t max_request_tokens = 0;
  // serve --scheduling-policy priority: requests may set `priority`
  // (vLLM's rule: with fcfs, a non-zero priority is refused).
  bool priority_scheduling = false;
  std::size_t max_document_bytes = 1 << 20;  // serve --max-document-bytes
};

// What `serve` sets for the decoder engine (its flags).
struct EngineOptions {
  EngineOptions() { scheduler.max_model_len = 0; }
  SchedulerConfig scheduler;  // max_model_len 0 = the model's max_position_embeddings
  int block_size = 16;
  // Bytes, a fraction of available memory, or "auto" (SizeKvCacheForEngine).
  std::string kv_cache_memory = "auto";
  // A CUDA worker's share of its device's memory for weights, activations
  // and the KV cache (vLLM's --gpu-memory-utilization); CPU workers ignore it.
  double gpu_memory_utilization = 0.9;
  // CUDA workers: every step eager, no CUDA graphs (vLLM's
  // --enforce-eager); otherwise decode steps replay graphs captured at
  // start-up. CPU workers always run eager.
  bool enforce_eager = false;
  double qa_token_share = 0.5;  // EngineConfig::encoder_token_share
  RequestLimitOptions requests;
  EngineObserver* observer = nullptr;  // metrics hooks; must outlive the service
  BlockHasher block_hasher;            // EngineConfig::block_hasher (empty: XXH3)
  KvEventSink* kv_events = nullptr;    // EngineConfig::kv_events; must outlive the service
  // serve --kv-offload-memory: the host KV tier's size (as --kv-cache-memory
  // reads it: bytes, or a fraction of the host's available memory); "" or
  // "0": no tier.
  std::string kv_offload_memory;
  // serve --kv-offload-path: the tier in a file in this directory (CPU
  // workers; ModelRunner::AllocateOffloadTier); "": in memory.
  std::string kv_offload_path;
  // A test hook for black-box fault tests (serve reads it from
  // ROPESERVE_INJECT_FAULTS): every N-th forward throws, as LibTorch does
  // when an allocation fails. 0 = off; never set it in production.
  std::int64_t inject_faults_every = 0;
};

struct GenerationServiceConfig {
  std::string name;                   // the served model name
  ModelConfig model;                  // vocabulary size, EOS ids, positions
  std::string dtype;                  // compute dtype ("bfloat16", "float32", ...)
  std::string quantization = "none";  // weight quantization ("none", "int8", "int4", "int4-all")
  std::string device = "cpu";         // where the model runs ("cpu", "cuda:0")
  EngineConfig engine;                // scheduler, KV blocks, EOS ids
  KvCacheSize kv;                     // what the KV cache holds (reported by /v1/models, metrics)
  KvCacheSize kv_offload;             // the host KV tier (num_blocks 0: none)
  RequestLimitOptions requests;       // EngineOptions::requests
  EngineObserver* observer = nullptr;
  bool engine_thread = true;  // false: offline, the caller's thread steps the engine
  // How the worker runs its steps, for the start-up log: "eager", or the
  // CUDA graphs captured (or why none could be).
  std::string execution = "eager";
};

// The positions of `e` that a left truncation to `keep_last` tokens keeps
// (transformers' truncation_side="left": the added special tokens and the
// text's last tokens); InvalidArgument naming truncate_prompt_tokens when
// the special tokens alone take keep_last. GenerationService::Tokenize's
// ids and the render endpoints' offsets both come from it.
StatusOr<std::vector<std::size_t>> KeptByLeftTruncation(const tok::Encoding& e, std::size_t keep_last);

class GenerationService {
 public:
  // Builds the engine over `executor` (owned) and, with engine_thread,
  // starts its thread. `tokenizer` may be null (token-id prompts only).
  static StatusOr<std::unique_ptr<GenerationService>> Create(GenerationServiceConfig config,
                                                             std::unique_ptr<ModelExecutor> executor,
                                                             std::shared_ptr<const tok::Tokenizer> tokenizer = nullptr);
  ~GenerationService();
  GenerationService(const GenerationService&) = delete;
  GenerationService& operator=(const GenerationService&) = delete;

  const std::string& name() const { return config_.name; }
  const ModelConfig& config() const { return config_.model; }
  const KvCacheSize& kv_cache() const { return config_.kv; }
  const KvCacheSize& kv_offload() const { return config_.kv_offload; }
  const std::string& execution() const { return config_.execution; }
  // The engine's shape (block size, scheduler limits), as /v1/info reports it.
  const EngineConfig& engine_config() const { return config_.engine; }
  int block_size() const { return config_.engine.block_size; }
  std::int64_t max_model_len() const { return config_.engine.scheduler.max_model_len; }
  // The compute dtype ("bfloat16", "float32", ...).
  const std::string& dtype() const { return config_.dtype; }
  const std::string& quantization() const { return config_.quantization; }
  const std::string& device() const { return config_.device; }
  // What the request validator checks against (server/service/request_params.h).
  const Limits& limits() const { return limits_; }
  Engine& engine() { return *engine_; }
  const tok::Tokenizer* tokenizer() const { return tokenizer_.get(); }

  // OK for "" (the only model) or the served name; NotFound otherwise.
  Status CheckModelName(const std::string& requested) const;

  // Submits to the engine; the caller reads the output incrementally.
  // kWait: waits for the engine's admission verdict and returns a refusal
  // (ResourceExhausted, InvalidArgument) as the error (REST answers it as
  // the HTTP status); kDontWait returns at once and a refusal is the first
  // thing Next() returns (gRPC's reactors, which must not block).
  // `prompt_ids` and `validated` come from PrepareGeneration
  // (input_processor.h), which validated them once (ValidatedGeneration
  // has no other maker). A prompt that is empty or longer than the one the
  // options were validated for, or an id outside the vocabulary, is a
  // caller's bug, refused as an Internal error. Start runs one choice
  // (validated.n() is StartN's).
  enum class Admission { kWait, kDontWait };
  StatusOr<std::unique_ptr<Generation>> Start(const std::vector<std::int64_t>& prompt_ids,
                                              const ValidatedGeneration& validated,
                                              Admission admission = Admission::kWait);
  // validated.n() choices for one prompt, read incrementally. The choices
  // share the prompt's full KV blocks through the prefix cache: the first
  // is prefilled alone, the others start once its first token exists.
  // Choice i samples with seed + i when seeded. Only the first choice
  // reports prompt logprobs (they are the same for all).
  StatusOr<std::vector<std::unique_ptr<Generation>>> StartN(const std::vector<std::int64_t>& prompt_ids,
                                                            const ValidatedGeneration& validated);
  // Start (choice 0) + read to the end. With a tokenizer, result.text holds
  // the text (special tokens skipped) and options.stop applies.
  StatusOr<GenerateResult> Generate(const std::vector<std::int64_t>& prompt_ids, const ValidatedGeneration& validated);
  // StartN + read to the end.
  StatusOr<std::vector<GenerateResult>> GenerateN(const std::vector<std::int64_t>& prompt_ids,
                                                  const ValidatedGeneration& validated);
  // Several prompts run together to their ends (prompt i samples with
  // seed + i when seeded and `seed_offsets`). `on_delta(i, delta)` sees
  // each prompt's output as it comes. Offline, the results' timing fields
  // (prefill_seconds, decode_seconds) are filled; with an engine thread the
  // outputs are read one after the other and the timings stay 0.
  using OnDelta = std::function<void(std::size_t, const Generation::Delta&)>;
  StatusOr<std::vector<GenerateResult>> GenerateBatch(const std::vector<std::vector<std::int64_t>>& prompts,
                                                      const ValidatedGeneration& validated, bool seed_offsets = false,
                                                      const OnDelta& on_delta = nullptr);

  // The prompt of a summarization request. With a chat template: one user
  // message "<instruction>\n\n<text>" rendered with the generation prompt
  // (special tokens come from the template). Without one, the plain text
  // "<instruction>\n\n<text>\n\nSummary:" tokenized with the tokenizer's
  // special tokens. An empty `instruction` means kDefaultSummaryInstruction.
  static constexpr const char* kDefaultSummaryInstruction =
      "Summarize the following text concisely, in a few sentences.";
  StatusOr<std::vector<std::int64_t>> SummaryPrompt(const std::string& text, const std::string& instruction) const;
  // FailedPrecondition naming what is missing when there is no tokenizer.
  // `keep_last` > 0: at most that many tokens, the text's first ones cut
  // and the added special tokens kept (transformers' truncation=True,
  // max_length=keep_last, truncation_side="left": vLLM's
  // truncate_prompt_tokens on a text prompt); InvalidArgument when the
  // special tokens alone take keep_last.
  StatusOr<std::vector<std::int64_t>> Tokenize(const std::string& text, bool add_special_tokens,
                                               std::size_t keep_last = 0) const;
  // The text of token ids; the same FailedPrecondition without a tokenizer,
  // InvalidArgument for an id outside its vocabulary.
  StatusOr<std::string> Detokenize(const std::vector<std::int64_t>& ids, bool skip_special_tokens) const;
  // Renders `messages` with the tokenizer_config.json chat template.
  StatusOr<std::string> ApplyChatTemplate(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                          const nlohmann::ordered_json& extra) const;
  // True when the chat template writes <think> blocks: chat replies then
  // carry the reasoning apart (server/service/reasoning.h).
  bool reasons() const { return reasons_; }
  // How the model writes tool calls when tool_choice is auto (from its
  // chat template).
  ToolFormat tool_format() const { return tool_format_; }
  // "<prefix>-<n>", unique within the process.
  std::string NextRequestId(const char* prefix);

  // The automaton of a structured-output constraint over this model's
  // vocabulary (compiled once per distinct constraint, cached). Start
  // calls it; callers may call it first to report a bad schema before
  // anything is submitted. InvalidArgument naming the constraint's field;
  // FailedPrecondition without a tokenizer.
  StatusOr<std::shared_ptr<const structured::CompiledGrammar>> CompileConstraint(const structured::Constraint& c);

 private:
  GenerationService() = default;
  // Waits until `g` has output (offline: steps the engine until it has).
  Status AwaitOutput(Generation& g);
  // The token sequences of bad words, as vLLM makes them (InvalidArgument
  // past kMaxBadWordTokens; FailedPrecondition without a tokenizer).
  StatusOr<std::vector<std::vector<TokenId>>> BadWordSequences(const std::vector<std::string>& words) const;
  // Reads `gens` to their ends (offline: stepping the engine between reads).
  StatusOr<std::vector<GenerateResult>> RunToEnd(std::vector<std::unique_ptr<Generation>>& gens,
                                                 const OnDelta& on_delta);

  GenerationServiceConfig config_;
  Limits limits_;
  // Declared before engine_: the engine refers to it until destroyed.
  std::unique_ptr<ModelExecutor> executor_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  bool reasons_ = false;
  ToolFormat tool_format_ = ToolFormat::kHermes;
  std::atomic<std::uint64_t> counter_{0};
  // Built on the first structured request (the vocabulary's bytes, sorted).
  std::once_flag grammars_once_;
  std::unique_ptr<structured::GrammarCompiler> grammars_;
};

}  // namespace ropeserve::service
