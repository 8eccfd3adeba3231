// The embedding service behind /v1/embeddings, TEI's /embed and gRPC
// Embed: a base encoder (ModernBertModel, RoFormerModel, a decoder trunk; a SpanModel
// without a head, server/models/span_model.h), its tokenizer and its
// sentence-transformers pooling (server/embedding/pooling.h). A call's
// inputs become windows of one encoder job (server/engine/encoder_queue.h),
// run in the engine's steps beside decodes and QA windows, or by a worker
// thread of the service when no engine serves. Each input is computed on
// tensors of its own shape, so its embedding does not depend on what else
// is in the step (docs/embeddings.md). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/checkpoint/encoder_config.h"
#include "server/common/status.h"
#include "server/common/token_id.h"
#include "server/embedding/pooling.h"
#include "server/models/span_model.h"
#include "server/service/window_job.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve {
class Engine;
}

namespace ropeserve::service {

// A text (tokenized with the model's special tokens, after the prompt) or
// token ids (used as they are: no prompt, no special tokens).
struct EmbedInput {
  std::string text;
  std::optional<std::vector<TokenId>> ids;
};

struct EmbedOptions {
  bool normalize = true;  // L2, after `dimensions` (vLLM's and TEI's default)
  // Inputs longer than the model's limit: cut (keeping the special tokens)
  // or refused (InvalidArgument naming the input).
  bool truncate = false;
  bool truncate_left = false;              // cut the start instead of the end
  std::optional<std::int64_t> dimensions;  // Matryoshka: the first N values
  // A prompt of config_sentence_transformers.json by name; unset: the
  // model's default_prompt_name (if any).
  std::optional<std::string> prompt_name;
};

struct EmbedResult {
  std::vector<float> embedding;
  std::int64_t tokens = 0;  // the input's tokens, prompt and specials included
};

struct EmbeddingServiceOptions {
  // The engine whose steps run the inputs (it must outlive the service);
  // null: the service's own worker thread runs them.
  Engine* engine = nullptr;
  std::int64_t max_batch_tokens = 8192;  // per forward, without an engine
  std::int64_t max_queue_requests = 1024;
  std::size_t max_inputs = 2048;           // per call (OpenAI's limit)
  std::size_t max_input_bytes = 1 << 20;   // per text input
  std::function<void(double)> on_latency;  // seconds per answered call; thread-safe
  // Runs EmbedAsync's pooling off the thread that finished the forward
  // (the engine's); false = full, then it runs there. Unset: inline.
  std::function<bool(std::function<void()>)> post;
};

// A call in flight (EmbedAsync); Cancel() drops its remaining inputs and
// completes it with Cancelled. Thread-safe.
using EmbedCall = EncoderCall;

class EmbeddingService {
 public:
  // `model` must be a base model (EncoderHead::kNone).
  static StatusOr<std::unique_ptr<EmbeddingService>> Create(std::unique_ptr<SpanModel> model,
                                                            std::shared_ptr<const tok::Tokenizer> tokenizer,
                                                            std::string served_name, embedding::EmbeddingConfig pooling,
                                                            EmbeddingServiceOptions options = {});
  ~EmbeddingService();

  const std::string& name() const { return name_; }
  const EncoderConfig& config() const;
  const embedding::EmbeddingConfig& pooling() const;
  std::int64_t dimensions() const { return config().hidden_size; }
  // The longest input in tokens: max_position_embeddings, or the
  // sentence-transformers max_seq_length when smaller.
  std::int64_t max_input_tokens() const;
  const tok::Tokenizer& tokenizer() const;
  // "embd-<n>", unique within the process.
  std::string NextRequestId() { return "embd-" + std::to_string(++counter_); }

  // Tokenizes on the calling thread (bad input is an error here, naming
  // `inputs[i]` as the parameter `param`), queues the inputs as one job and
  // waits for them. `timeout_seconds` > 0 bounds the wait; `abandoned`,
  // when set, is polled every 200 ms (true cancels: the client left).
  StatusOr<std::vector<EmbedResult>> Embed(const std::vector<EmbedInput>& inputs, const EmbedOptions& options,
                                           double timeout_seconds = 0, bool (*abandoned)() = nullptr,
                                           const std::string& param = "input");
  // The same without blocking (gRPC): inputs are tokenized on the calling
  // thread (bad input is an error here), then `done` runs exactly once with
  // the embeddings or the failure (deadline, cancel, engine stopped), on
  // the `post` executor, the engine's thread or the service's worker: keep
  // it short.
  using Done = std::function<void(StatusOr<std::vector<EmbedResult>>)>;
  StatusOr<std::shared_ptr<EmbedCall>> EmbedAsync(const std::vector<EmbedInput>& inputs, const EmbedOptions& options,
                                                  double timeout_seconds, Done done,
                                                  const std::string& param = "inputs");

 private:
  EmbeddingService() = default;
  struct Prepared;
  StatusOr<std::shared_ptr<Prepared>> Prepare(const std::vector<EmbedInput>& inputs, const EmbedOptions& options,
                                              double timeout_seconds, const std::string& param) const;
  StatusOr<std::vector<EmbedResult>> Finish(Prepared& p) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string name_;
  std::atomic<std::uint64_t> counter_{0};
};

}  // namespace ropeserve::service
