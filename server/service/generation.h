// The output processor: one running generation read incrementally, with
// the engine's token ids turned into what every transport and the CLI
// return -- incremental detokenization, stop strings (text that could begin
// one is held back), logprobs, and the finish reason as OpenAI names it.
// Torch-free. Not thread-safe: one reader.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/common/status.h"
#include "server/engine/engine.h"
#include "server/service/request_params.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve::service {

class GenerationService;

struct OutputDelta {
  std::vector<std::int64_t> ids;                        // tokens since the previous Delta
  std::vector<double> logprobs;                         // of each id
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // when asked
  // Logprobs of prompt tokens 1, 2, ... (options.prompt_logprobs); they
  // all come before the first generated token.
  std::vector<double> prompt_logprobs;
  std::vector<std::int64_t> prompt_ranks;  // vLLM's rank of each prompt token
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;
  // New text (special tokens skipped). Text that could be the start of a
  // stop string is held back until it is known not to be one.
  std::string text;
  bool finished = false;
  std::string finish_reason;  // when finished: "stop" | "length"
  std::string stop_string;    // finish_reason "stop" by a stop string: that string (vLLM's stop_reason)
  std::int64_t prompt_tokens = 0;
  std::int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
  // In the last delta: every token generated for the request. A document
  // summary (server/service/document_summary.h) counts its intermediate
  // summaries here and in prompt_tokens / cached_tokens too.
  std::int64_t completion_tokens = 0;
  // Document summaries only: a step of their map, reduce or refine phase
  // ended (such a delta carries no ids or text).
  struct Progress {
    std::string phase;  // "map" | "reduce" | "refine"
    int done = 0;
    int total = 0;
  };
  std::optional<Progress> progress;
};

// What transports read a request's output from: one Generation, or a
// document summary's phases ending in one (server/service/document_summary.h).
// Not thread-safe: one reader.
class OutputSource {
 public:
  virtual ~OutputSource() = default;
  // Waits up to `timeout` (nullopt: until something arrives) and returns
  // what is new; an empty delta on timeout. An error when the request
  // failed: DeadlineExceeded, Cancelled, or the engine's error.
  virtual StatusOr<OutputDelta> Next(std::optional<std::chrono::milliseconds> timeout = std::nullopt) = 0;
  // `fn` runs (on the engine's thread) whenever new output may be ready;
  // with call_if_ready, at once too when it already is. See
  // RequestStream::SetNotify.
  virtual void SetNotify(std::function<void()> fn, bool call_if_ready = true) = 0;
  virtual void Cancel() = 0;
  virtual bool finished() const = 0;
  // The prompt's tokens, as far as known when it starts (0 for a document
  // summary: its last delta has the totals).
  virtual std::int64_t prompt_tokens() const = 0;

  // Reads a source to its end (result.prompt_ids left empty). With
  // `abandoned`, it is polled every 200 ms: true cancels the source
  // (Cancelled) -- a unary client that disconnected. `last`, when given,
  // receives the final delta's counts (usage).
  static StatusOr<GenerateResult> Collect(OutputSource& g, bool (*abandoned)() = nullptr, OutputDelta* last = nullptr);
};

// Destroying an unfinished Generation cancels its request (its KV blocks
// return to the pool at the engine's next step).
class Generation final : public OutputSource {
 public:
  using Delta = OutputDelta;
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;
  StatusOr<Delta> Next(std::optional<std::chrono::milliseconds> timeout = std::nullopt) override;
  void SetNotify(std::function<void()> fn, bool call_if_ready = true) override;
  void Cancel() override;
  bool finished() const override { return finished_; }
  std::int64_t prompt_tokens() const override { return static_cast<std::int64_t>(prompt_size_); }
  // Appends a delta to a result (ids, logprobs, text; the finish reason and
  // cached tokens at the end); returns d.finished.
  static bool Append(GenerateResult& r, Delta& d);
  // Reads generations to their ends (they run concurrently in the engine).
  static StatusOr<std::vector<GenerateResult>> CollectAll(std::vector<std::unique_ptr<Generation>>& gens,
                                                          bool (*abandoned)() = nullptr);

 private:
  friend class GenerationService;
  // `tokenizer` null: ids only (no text, no stop strings).
  Generation(Engine& engine, std::shared_ptr<RequestStream> stream, const GenerateOptions& options,
             std::size_t prompt_size, std::shared_ptr<const tok::Tokenizer> tokenizer);
  // Moves text that can no longer start a stop string into `out`.
  void Release(Delta& out, bool all);
  // Appends a token's text; true when a stop string completed in it.
  StatusOr<bool> PushText(TokenId id);

  Engine& engine_;
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
  std::string stop_string_;  // the stop string that cut text_
  bool stopped_ = false;     // a stop string was found; waiting for the engine to confirm the cancel
  bool finished_ = false;
};

}  // namespace ropeserve::service
