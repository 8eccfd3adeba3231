// What the API layers share: the served model, its public name, request ids,
// and the engine that batches every transport's requests together.
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "server/checkpoint/model_config.h"
#include "server/engine/engine.h"
#include "server/engine/kv_cache_sizing.h"
#include "server/runner/generate.h"
#include "server/service/request_params.h"
#include "server/template/chat_template.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve {
class DecoderModel;
class ModelRunner;
}

namespace ropeserve::api {

struct EngineOptions {
  EngineOptions() { scheduler.max_model_len = 0; }
  SchedulerConfig scheduler;  // max_model_len 0 = the model's max_position_embeddings
  int block_size = 16;
  std::string kv_cache_memory = "0.25";  // bytes or fraction of available memory
  double qa_token_share = 0.5;           // EngineConfig::encoder_token_share
  // Tokens one request may reserve over all its sequences (serve
  // --max-request-tokens); 0 = the KV cache's capacity.
  std::int64_t max_request_tokens = 0;
  EngineObserver* observer = nullptr;    // metrics hooks; must outlive the service
};

class ModelService;

// One running request, read incrementally. Not thread-safe: one reader.
// Destroying an unfinished Generation cancels its request (its KV blocks
// return to the pool at the engine's next step).
class Generation {
 public:
  struct Delta {
    std::vector<std::int64_t> ids;  // tokens since the previous Delta
    std::vector<double> logprobs;   // of each id
    std::vector<std::vector<TokenLogprob>> top_logprobs;  // when asked
    // New text (special tokens skipped). Text that could be the start of a
    // stop string is held back until it is known not to be one.
    std::string text;
    bool finished = false;
    std::string finish_reason;  // when finished: "stop" | "length"
    std::int64_t prompt_tokens = 0;
    std::int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
  };
  ~Generation();
  // Waits up to `timeout` (nullopt: until something arrives) and returns
  // what is new; an empty Delta on timeout. An error when the request
  // failed: DeadlineExceeded, Cancelled, or the engine's error.
  StatusOr<Delta> Next(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // See RequestStream::SetNotify.
  void SetNotify(std::function<void()> fn, bool call_if_ready = true);
  void Cancel();
  bool finished() const { return finished_; }
  std::int64_t prompt_tokens() const { return static_cast<std::int64_t>(prompt_size_); }

 private:
  friend class ModelService;
  Generation() = default;
  // Moves text that can no longer start a stop string into `out`.
  void Release(Delta& out, bool all);
  Engine* engine_ = nullptr;
  std::shared_ptr<RequestStream> stream_;
  GenerateOptions options_;
  std::optional<tok::IncrementalDecoder> detok_;
  std::size_t prompt_size_ = 0;
  std::int64_t generated_ = 0;
  std::string text_;          // decoded so far (cut at a stop string)
  std::size_t released_ = 0;  // bytes of text_ handed out
  // Stop strings as KMP automata (hand-written: no Debian library offers
  // incremental multi-pattern matching over a growing string): per stop
  // string its failure function and the length of its longest prefix that
  // ends the text so far. One pass per new byte finds stop strings that
  // span tokens and gives the tail to hold back, in O(new bytes) per token.
  struct StopMatcher {
    std::string stop;
    std::vector<std::size_t> fail;
    std::size_t state = 0;
  };
  std::vector<StopMatcher> stops_;
  bool stopped_ = false;      // a stop string was found; waiting for the engine to confirm the cancel
  bool finished_ = false;
};

class ModelService {
 public:
  // Sizes the KV cache, allocates it and starts the engine thread.
  // `tokenizer` may be null (token-id prompts only).
  static StatusOr<std::unique_ptr<ModelService>> Create(const DecoderModel& model, std::string served_name,
                                                        EngineOptions options = {},
                                                        std::shared_ptr<const tok::Tokenizer> tokenizer = nullptr);
  ~ModelService();

  const std::string& name() const { return name_; }
  const ModelConfig& config() const;
  const KvCacheSize& kv_cache() const { return kv_; }
  std::int64_t max_model_len() const { return max_model_len_; }
  // What the request validator checks against (server/service/request_params.h).
  const service::Limits& limits() const { return limits_; }
  Engine& engine() { return *engine_; }

  // OK for "" (the only model) or the served name; NotFound otherwise.
  Status CheckModelName(const std::string& requested) const;
  // Submits to the engine; the caller reads the output incrementally.
  StatusOr<std::unique_ptr<Generation>> Start(const std::vector<std::int64_t>& prompt_ids,
                                              const GenerateOptions& options);
  // Submits to the engine and waits for the whole generation. With a
  // tokenizer, fills result.text (special tokens skipped) and applies
  // options.stop (the request is cancelled as soon as a stop string shows).
  StatusOr<GenerateResult> Generate(const std::vector<std::int64_t>& prompt_ids, const GenerateOptions& options);

  // n choices for one prompt (1 <= n <= service::kMaxChoices). The choices share the
  // prompt's full KV blocks through the prefix cache: the first is
  // prefilled alone, the others start once its first token exists.
  StatusOr<std::vector<GenerateResult>> GenerateN(const std::vector<std::int64_t>& prompt_ids,
                                                  const GenerateOptions& options, int n);
  // Reads a generation to its end (result.prompt_ids left empty). With
  // `abandoned`, it is polled every 200 ms: true cancels the generation
  // (Cancelled) -- a unary client that disconnected.
  static StatusOr<GenerateResult> Collect(Generation& g, bool (*abandoned)() = nullptr);
  // Reads generations to their ends (they run concurrently in the engine).
  static StatusOr<std::vector<GenerateResult>> CollectAll(std::vector<std::unique_ptr<Generation>>& gens,
                                                          bool (*abandoned)() = nullptr);
  // The same as GenerateN, read incrementally (for streaming n > 1).
  StatusOr<std::vector<std::unique_ptr<Generation>>> StartN(const std::vector<std::int64_t>& prompt_ids,
                                                            const GenerateOptions& options, int n);

  const tok::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const EngineOptions& options() const { return options_; }
  // The model's compute dtype ("bfloat16", "float32", ...).
  std::string dtype() const;

  // The prompt of a summarization request. With a chat template: one user
  // message "<instruction>\n\n<text>" rendered with the generation prompt
  // (special tokens come from the template). Without one, the plain text
  // "<instruction>\n\n<text>\n\nSummary:" tokenized with the tokenizer's
  // special tokens. An empty `instruction` means kDefaultSummaryInstruction.
  static constexpr const char* kDefaultSummaryInstruction =
      "Summarize the following text concisely, in a few sentences.";
  StatusOr<std::vector<std::int64_t>> SummaryPrompt(const std::string& text, const std::string& instruction) const;
  // FailedPrecondition naming what is missing when there is no tokenizer.
  StatusOr<std::vector<std::int64_t>> Tokenize(const std::string& text, bool add_special_tokens) const;
  // Renders `messages` with the tokenizer_config.json chat template.
  StatusOr<std::string> ApplyChatTemplate(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                          const nlohmann::ordered_json& extra) const;
  // "<prefix>-<n>", unique within the process.
  std::string NextRequestId(const char* prefix);

 private:
  ModelService() = default;
  static StatusOr<std::unique_ptr<ModelService>> CreateEngine(const DecoderModel& model, std::string served_name,
                                                              EngineOptions options);

  const DecoderModel* model_ = nullptr;
  EngineOptions options_;
  std::string name_;
  KvCacheSize kv_;
  std::int64_t max_model_len_ = 0;
  service::Limits limits_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<ModelExecutor> fault_injector_;  // ROPESERVE_INJECT_FAULTS only
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  std::atomic<std::uint64_t> counter_{0};
};

}  // namespace ropeserve::api
