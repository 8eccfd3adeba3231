// What the API layers share: the served model, its public name, request ids,
// and the engine that batches every transport's requests together.
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "server/checkpoint/model_config.h"
#include "server/engine/engine.h"
#include "server/engine/kv_cache_sizing.h"
#include "server/runner/generate.h"
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
  Engine& engine() { return *engine_; }

  // OK for "" (the only model) or the served name; NotFound otherwise.
  Status CheckModelName(const std::string& requested) const;
  // Submits to the engine and waits for the whole generation. With a
  // tokenizer, fills result.text (special tokens skipped) and applies
  // options.stop (the request is cancelled as soon as a stop string shows).
  StatusOr<GenerateResult> Generate(const std::vector<std::int64_t>& prompt_ids, const GenerateOptions& options);

  // n choices for one prompt (1 <= n <= kMaxChoices). The choices share the
  // prompt's full KV blocks through the prefix cache: the first is
  // prefilled alone, the others start once its first token exists.
  static constexpr int kMaxChoices = 16;
  StatusOr<std::vector<GenerateResult>> GenerateN(const std::vector<std::int64_t>& prompt_ids,
                                                  const GenerateOptions& options, int n);

  const tok::Tokenizer* tokenizer() const { return tokenizer_.get(); }
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
  struct Pending;
  StatusOr<std::unique_ptr<Pending>> Start(const std::vector<std::int64_t>& prompt_ids, const GenerateOptions& options);
  // Reads the request to its end; `on_first_token` runs once, after the
  // first token arrived.
  StatusOr<GenerateResult> Collect(Pending& p, const std::function<void()>& on_first_token);
  const DecoderModel* model_ = nullptr;
  std::string name_;
  KvCacheSize kv_;
  std::int64_t max_model_len_ = 0;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  std::atomic<std::uint64_t> counter_{0};
};

}  // namespace ropeserve::api
