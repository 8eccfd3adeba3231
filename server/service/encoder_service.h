// The encoder service: one encoder checkpoint (server/models/span_model.h),
// its tokenizer, and the task its head decides:
//  - embeddings (a base model: ModernBertModel, RoFormerModel, a decoder
//    trunk) pooled as its sentence-transformers metadata says
//    (server/embedding/pooling.h): /v1/embeddings, TEI's /embed, gRPC Embed;
//  - classification (a sequence classifier, …ForSequenceClassification):
//    /classify, TEI's /predict, gRPC Classify;
//  - pair scoring (/score, /rerank, gRPC Rerank): a cross-encoder (a
//    classifier of one label) scores each (query, document) pair as one
//    input; an embedder scores the cosine of their embeddings;
//  - token classification (…ForTokenClassification): entities grouped as
//    transformers' pipeline does (server/qa/token_entities.h):
//    /v1/token-classify, gRPC ClassifyTokens.
// A call's inputs become windows of one encoder job
// (server/engine/encoder_queue.h), run in the engine's steps beside decodes
// and QA windows, or by a worker thread of the service when no engine
// serves. Each input is computed on tensors of its own shape, so its
// output does not depend on what else is in the step (docs/embeddings.md,
// docs/classification.md). Thread-safe.
#pragma once

#include <algorithm>
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
#include "server/qa/token_entities.h"
#include "server/service/window_job.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve {
class Engine;
}

namespace ropeserve::service {

// A text (tokenized with the model's special tokens, after the prompt), a
// pair of texts (`text`, `pair`: the tokenizer's pair template, as a
// cross-encoder reads a query and a document), or token ids (used as they
// are: no prompt, no special tokens).
struct EncoderInput {
  std::string text;
  std::optional<std::vector<TokenId>> ids;
  std::optional<std::string> pair;

  static EncoderInput Text(std::string text) { return {std::move(text), std::nullopt, std::nullopt}; }
  static EncoderInput Ids(std::vector<TokenId> ids) { return {"", std::move(ids), std::nullopt}; }
  static EncoderInput Pair(std::string first, std::string second) {
    return {std::move(first), std::nullopt, std::move(second)};
  }
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

struct ClassifyOptions {
  // Which activation turns the logits into scores: the classifier's
  // (EncoderConfig::classify_activation), the cross-encoder's
  // (score_activation), or none (the raw logits: TEI's raw_scores).
  enum class Activation { kClassify, kScore, kNone };
  Activation activation = Activation::kClassify;
  bool truncate = false;  // as EmbedOptions; a pair is cut longest first
  bool truncate_left = false;
};

struct ClassifyResult {
  std::vector<float> scores;  // one per label, in id2label's order
  std::int64_t tokens = 0;
};

// Token classification: how tokens become entities (qa::GroupEntities).
struct TokenClassifyOptions {
  qa::Aggregation aggregation = qa::Aggregation::kSimple;
  std::vector<std::string> ignore_labels = {"O"};
  bool truncate = false;  // as EmbedOptions
  bool truncate_left = false;
};

struct TokenClassifyResult {
  std::vector<qa::Entity> entities;  // offsets in code points of the input
  std::int64_t tokens = 0;
};

// Pair scoring: the relevance of each document to the query.
struct ScoreOptions {
  bool truncate = false;
  bool truncate_left = false;
  bool raw = false;  // a cross-encoder's logit without its activation
};

struct ScoreResult {
  double score = 0;
  std::int64_t tokens = 0;  // the pair's (cross-encoder) or the document's (embedder)
};

// Indices of `values` from the highest down, the best `top_n` (0: all);
// ties keep their order. How labels (/predict, the best label) and
// documents (/rerank, gRPC Rerank, /v1/qa's retrieve) are ranked.
template <class T>
std::vector<std::size_t> RankDescending(const std::vector<T>& values, std::size_t top_n = 0) {
  std::vector<std::size_t> order(values.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return values[a] > values[b]; });
  if (top_n > 0 && top_n < order.size()) order.resize(top_n);
  return order;
}
std::vector<std::size_t> RankByScore(const std::vector<ScoreResult>& results, std::size_t top_n = 0);

struct EncoderServiceOptions {
  // The engine whose steps run the inputs (it must outlive the service);
  // null: the service's own worker thread runs them.
  Engine* engine = nullptr;
  std::int64_t max_batch_tokens = 8192;  // per forward, without an engine
  std::int64_t max_queue_requests = 1024;
  std::size_t max_inputs = 2048;           // per call (OpenAI's limit; documents of a rerank)
  std::size_t max_input_bytes = 1 << 20;   // per text input
  std::function<void(double)> on_latency;  // seconds per answered call; thread-safe
  // Runs EmbedAsync's pooling off the thread that finished the forward
  // (the engine's); false = full, then it runs there. Unset: inline.
  std::function<bool(std::function<void()>)> post;
};

// A call in flight (EmbedAsync); Cancel() drops its remaining inputs and
// completes it with Cancelled. Thread-safe.
using EmbedCall = EncoderCall;

class EncoderService {
 public:
  // `model` is a base model (EncoderHead::kNone), a sequence classifier
  // (kSequence) or a token classifier (kToken); InvalidArgument for a span
  // head (QaService serves those).
  static StatusOr<std::unique_ptr<EncoderService>> Create(std::unique_ptr<SpanModel> model,
                                                          std::shared_ptr<const tok::Tokenizer> tokenizer,
                                                          std::string served_name, embedding::EmbeddingConfig pooling,
                                                          EncoderServiceOptions options = {});
  ~EncoderService();

  const std::string& name() const { return name_; }
  const EncoderConfig& config() const;
  const embedding::EmbeddingConfig& pooling() const;
  std::int64_t dimensions() const { return config().hidden_size; }
  // What the head serves.
  bool embeds() const { return config().head == EncoderHead::kNone; }
  bool classifies() const { return config().head == EncoderHead::kSequence; }
  bool classifies_tokens() const { return config().head == EncoderHead::kToken; }
  // Pair scoring: an embedder (cosine) or a classifier of one label.
  bool scores_pairs() const { return embeds() || (classifies() && config().num_labels == 1); }
  // "embed", "classify", "score" (a cross-encoder) or "token_classify":
  // /v1/models' task.
  const char* task() const;
  // The longest input in tokens: max_position_embeddings, or the
  // sentence-transformers max_seq_length when smaller.
  std::int64_t max_input_tokens() const;
  const tok::Tokenizer& tokenizer() const;
  // "<prefix>-<n>", unique within the process.
  std::string NextRequestId(const std::string& prefix = "embd") { return prefix + "-" + std::to_string(++counter_); }

  // Tokenizes on the calling thread (bad input is an error here, naming
  // `inputs[i]` as the parameter `param`), queues the inputs as one job and
  // waits for them. `timeout_seconds` > 0 bounds the wait; `abandoned`,
  // when set, is polled every 200 ms (true cancels: the client left).
  StatusOr<std::vector<EmbedResult>> Embed(const std::vector<EncoderInput>& inputs, const EmbedOptions& options,
                                           double timeout_seconds = 0, bool (*abandoned)() = nullptr,
                                           const std::string& param = "input");
  // The same without blocking (gRPC): inputs are tokenized on the calling
  // thread (bad input is an error here), then `done` runs exactly once with
  // the embeddings or the failure (deadline, cancel, engine stopped), on
  // the `post` executor, the engine's thread or the service's worker: keep
  // it short.
  using Done = std::function<void(StatusOr<std::vector<EmbedResult>>)>;
  StatusOr<std::shared_ptr<EmbedCall>> EmbedAsync(const std::vector<EncoderInput>& inputs, const EmbedOptions& options,
                                                  double timeout_seconds, Done done,
                                                  const std::string& param = "inputs");

  // A sequence classifier's scores for each input (texts or pairs), as
  // Embed: FailedPrecondition when the model is not a classifier.
  StatusOr<std::vector<ClassifyResult>> Classify(const std::vector<EncoderInput>& inputs,
                                                 const ClassifyOptions& options, double timeout_seconds = 0,
                                                 bool (*abandoned)() = nullptr, const std::string& param = "input");
  using ClassifyDone = std::function<void(StatusOr<std::vector<ClassifyResult>>)>;
  StatusOr<std::shared_ptr<EncoderCall>> ClassifyAsync(const std::vector<EncoderInput>& inputs,
                                                       const ClassifyOptions& options, double timeout_seconds,
                                                       ClassifyDone done, const std::string& param = "inputs");

  // A token classifier's entities in each text (EncoderInput::Text only),
  // as Embed: FailedPrecondition when the model is not a token classifier.
  StatusOr<std::vector<TokenClassifyResult>> ClassifyTokens(const std::vector<EncoderInput>& inputs,
                                                            const TokenClassifyOptions& options,
                                                            double timeout_seconds = 0, bool (*abandoned)() = nullptr,
                                                            const std::string& param = "input");
  using ClassifyTokensDone = std::function<void(StatusOr<std::vector<TokenClassifyResult>>)>;
  StatusOr<std::shared_ptr<EncoderCall>> ClassifyTokensAsync(const std::vector<EncoderInput>& inputs,
                                                             const TokenClassifyOptions& options,
                                                             double timeout_seconds, ClassifyTokensDone done,
                                                             const std::string& param = "inputs");

  // The relevance of each of `documents` to its query (scores_pairs()
  // models): `queries` holds one query for every document, or one per
  // document. A cross-encoder reads each (query, document) pair as one
  // input; an embedder embeds both (normalized) and returns their cosine.
  // FailedPrecondition for other models; errors name `queries[i]` or
  // `documents[i]` (`query_param`, `param`).
  struct ScorePairs {
    std::vector<std::string> queries, documents;
    std::string query_param = "query", param = "documents";
  };
  StatusOr<std::vector<ScoreResult>> Score(const ScorePairs& pairs, const ScoreOptions& options,
                                           double timeout_seconds = 0, bool (*abandoned)() = nullptr);
  using ScoreDone = std::function<void(StatusOr<std::vector<ScoreResult>>)>;
  StatusOr<std::shared_ptr<EncoderCall>> ScoreAsync(const ScorePairs& pairs, const ScoreOptions& options,
                                                    double timeout_seconds, ScoreDone done);

 private:
  EncoderService() = default;
  struct Prepared;
  // How Prepare tokenizes: truncation, and a prompt (embeddings only).
  struct Tokenize {
    bool truncate = false;
    bool truncate_left = false;
    std::optional<std::string> prompt_name;
    bool use_prompt = false;
    bool keep_encodings = false;  // token classification: texts and their encodings kept
  };
  static Tokenize EmbedTokenize(const EmbedOptions& o) { return {o.truncate, o.truncate_left, o.prompt_name, true}; }
  static Tokenize Truncating(bool truncate, bool left) { return {truncate, left, std::nullopt, false}; }
  Status CheckDimensions(const EmbedOptions& options) const;
  // Errors about one input name it `param[i]` (`param` alone for a single
  // input), or `name_input(i)` when given (pair scoring: the query or
  // document behind input i); errors about the request name `param`.
  StatusOr<std::shared_ptr<Prepared>> Prepare(const std::vector<EncoderInput>& inputs, const Tokenize& how,
                                              double timeout_seconds, const std::string& param,
                                              const std::function<std::string(std::size_t)>& name_input = {}) const;
  StatusOr<std::vector<EmbedResult>> FinishEmbed(Prepared& p, const EmbedOptions& options) const;
  StatusOr<std::vector<ClassifyResult>> FinishClassify(Prepared& p, const ClassifyOptions& options) const;
  StatusOr<std::vector<TokenClassifyResult>> FinishTokens(Prepared& p, const TokenClassifyOptions& options) const;
  // Score as a computation on the outputs of one job.
  StatusOr<std::vector<ScoreResult>> FinishScore(Prepared& p, const ScoreOptions& options,
                                                 std::size_t num_queries) const;
  StatusOr<std::shared_ptr<Prepared>> PrepareScore(const ScorePairs& pairs, const ScoreOptions& options,
                                                   double timeout_seconds) const;
  void Observe(const Prepared& p) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string name_;
  std::atomic<std::uint64_t> counter_{0};
};

}  // namespace ropeserve::service
