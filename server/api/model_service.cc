#include "server/api/model_service.h"

#include <spdlog/spdlog.h>

#include "server/models/decoder.h"
#include "server/runner/model_runner.h"

namespace ropeserve::api {

StatusOr<std::unique_ptr<ModelService>> ModelService::Create(const DecoderModel& model, std::string served_name,
                                                             EngineOptions options) {
  std::unique_ptr<ModelService> s(new ModelService());
  s->model_ = &model;
  s->name_ = std::move(served_name);
  const ModelConfig& c = model.config();
  if (options.scheduler.max_model_len <= 0) options.scheduler.max_model_len = c.max_position_embeddings;
  if (options.scheduler.max_model_len > c.max_position_embeddings)
    return InvalidArgument("--max-model-len " + std::to_string(options.scheduler.max_model_len) +
                           " exceeds the model's max_position_embeddings " + std::to_string(c.max_position_embeddings));
  RS_RETURN_IF_ERROR(options.scheduler.Validate());
  if (options.block_size < 1 || options.block_size > 1024) return InvalidArgument("--block-size must be in [1, 1024]");
  s->max_model_len_ = options.scheduler.max_model_len;

  RS_ASSIGN_OR_RETURN(s->kv_, SizeKvCacheForEngine(options.kv_cache_memory, model.KvBytesPerToken(),
                                                   options.block_size, s->max_model_len_,
                                                   options.scheduler.max_num_seqs));
  if (s->kv_.num_blocks > (1LL << 31) - 1) return InvalidArgument("--kv-cache-memory is too large");
  spdlog::info("KV cache: {} blocks x {} tokens = {} tokens, {} bytes per token, {:.1f} MiB", s->kv_.num_blocks,
               options.block_size, s->kv_.tokens, model.KvBytesPerToken(),
               static_cast<double>(s->kv_.bytes) / (1 << 20));

  s->runner_ = std::make_unique<ModelRunner>(model, s->kv_.num_blocks, options.block_size);
  EngineConfig ec;
  ec.scheduler = options.scheduler;
  ec.num_blocks = static_cast<int>(s->kv_.num_blocks);
  ec.block_size = options.block_size;
  ec.eos_token_ids.assign(c.eos_token_ids.begin(), c.eos_token_ids.end());
  s->engine_ = std::make_unique<Engine>(ec, *s->runner_);
  s->engine_->Start();
  return s;
}

ModelService::~ModelService() {
  if (engine_) engine_->Stop();
}

const ModelConfig& ModelService::config() const { return model_->config(); }

Status ModelService::CheckModelName(const std::string& requested) const {
  if (requested.empty() || requested == name_) return Status::Ok();
  return NotFound("model '" + requested + "' does not exist (served: '" + name_ + "')");
}

StatusOr<GenerateResult> ModelService::Generate(const std::vector<std::int64_t>& prompt_ids,
                                                const GenerateOptions& options) {
  if (options.top_logprobs > 20) return InvalidArgument("top_logprobs must be at most 20");
  if (options.max_tokens < 1) return InvalidArgument("max_tokens must be at least 1");
  EngineRequest r;
  for (auto id : prompt_ids) {
    if (id < 0 || id >= config().vocab_size)
      return InvalidArgument("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(config().vocab_size) + ")");
    r.prompt.push_back(static_cast<TokenId>(id));
  }
  r.max_tokens = options.max_tokens;
  r.sampling = options.sampling;
  r.ignore_eos = options.ignore_eos;
  r.top_logprobs = options.top_logprobs;
  RS_ASSIGN_OR_RETURN(auto stream, engine_->Submit(std::move(r)));

  GenerateResult result;
  result.prompt_ids = prompt_ids;
  for (;;) {
    StreamChunk c = stream->Next();
    for (auto& t : c.tokens) {
      result.generated_ids.push_back(t.id);
      result.logprobs.push_back(t.logprob);
      if (options.top_logprobs > 0) {
        std::vector<TokenLogprob> top;
        for (auto [id, lp] : t.top_logprobs) top.push_back({id, lp});
        result.top_logprobs.push_back(std::move(top));
      }
    }
    if (!c.finished) continue;
    if (c.finish_reason == "error") return c.error;
    if (c.finish_reason == "deadline") return Status(ErrorCode::kDeadlineExceeded, "request timed out");
    if (c.finish_reason == "cancelled") return Status(ErrorCode::kCancelled, "request cancelled");
    result.finish_reason = c.finish_reason;
    return result;
  }
}

std::string ModelService::NextRequestId(const char* prefix) {
  return std::string(prefix) + "-" + std::to_string(++counter_);
}

}  // namespace ropeserve::api
