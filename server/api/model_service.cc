#include "server/api/model_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/models/decoder.h"
#include "server/runner/model_runner.h"

namespace ropeserve::api {

StatusOr<std::unique_ptr<ModelService>> ModelService::Create(const DecoderModel& model, std::string served_name,
                                                            EngineOptions options,
                                                            std::shared_ptr<const tok::Tokenizer> tokenizer) {
  RS_ASSIGN_OR_RETURN(auto s, CreateEngine(model, std::move(served_name), std::move(options)));
  s->tokenizer_ = std::move(tokenizer);
  if (s->tokenizer_ && s->tokenizer_->config().chat_template) {
    RS_ASSIGN_OR_RETURN(auto t, ChatTemplate::FromSource(*s->tokenizer_->config().chat_template));
    s->chat_template_ = std::move(t);
  }
  return s;
}

StatusOr<std::unique_ptr<ModelService>> ModelService::CreateEngine(const DecoderModel& model, std::string served_name,
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
  if (options.min_tokens < 0 || options.min_tokens > options.max_tokens) {
    return InvalidArgument("min_tokens must be between 0 and max_tokens");
  }
  r.min_tokens = options.min_tokens;
  for (auto id : options.stop_token_ids) {
    if (id < 0 || id >= config().vocab_size) return InvalidArgument("stop_token_ids: " + std::to_string(id) + " is outside the vocabulary");
    r.stop_token_ids.push_back(static_cast<TokenId>(id));
  }
  r.sampling = options.sampling;
  r.ignore_eos = options.ignore_eos;
  r.top_logprobs = options.top_logprobs;
  if (!options.stop.empty() && !tokenizer_) {
    return FailedPrecondition("'stop' strings need the model's tokenizer.json, which this server has not loaded");
  }
  for (const auto& st : options.stop) {
    if (st.empty()) return InvalidArgument("'stop' strings must not be empty");
  }
  RS_ASSIGN_OR_RETURN(auto stream, engine_->Submit(std::move(r)));

  GenerateResult result;
  result.prompt_ids = prompt_ids;
  std::optional<tok::IncrementalDecoder> detok;
  if (tokenizer_) detok.emplace(tokenizer_, /*skip_special_tokens=*/true);
  size_t max_stop = 0;
  for (const auto& st : options.stop) max_stop = std::max(max_stop, st.size());
  bool stopped = false;
  for (;;) {
    StreamChunk c = stream->Next();
    for (auto& t : c.tokens) {
      if (stopped) break;  // tokens already in flight when we cancelled
      result.generated_ids.push_back(t.id);
      result.logprobs.push_back(t.logprob);
      if (options.top_logprobs > 0) {
        std::vector<TokenLogprob> top;
        for (auto [id, lp] : t.top_logprobs) top.push_back({id, lp});
        result.top_logprobs.push_back(std::move(top));
      }
      if (detok) {
        const size_t before = result.text.size();
        RS_ASSIGN_OR_RETURN(std::string piece, detok->Push(static_cast<uint32_t>(t.id)));
        result.text += piece;
        // A stop string may straddle the previous piece.
        // Stop strings count only from min_tokens on (as vLLM).
        const size_t from = before > max_stop ? before - max_stop : 0;
        size_t cut = std::string::npos;
        if (static_cast<std::int64_t>(result.generated_ids.size()) >= options.min_tokens) {
          for (const auto& st : options.stop) cut = std::min(cut, result.text.find(st, from));
        }
        if (cut != std::string::npos) {
          result.text.resize(cut);
          stopped = true;
        }
      }
      if (stopped) engine_->Cancel(stream->id());
    }
    if (!c.finished) continue;
    if (stopped) {
      result.finish_reason = "stop";
      return result;
    }
    if (c.finish_reason == "error") return c.error;
    if (c.finish_reason == "deadline") return Status(ErrorCode::kDeadlineExceeded, "request timed out");
    if (c.finish_reason == "cancelled") return Status(ErrorCode::kCancelled, "request cancelled");
    if (detok) {
      RS_ASSIGN_OR_RETURN(std::string rest, detok->Finish());
      result.text += rest;
    }
    result.finish_reason = c.finish_reason;
    return result;
  }
}

StatusOr<std::vector<std::int64_t>> ModelService::Tokenize(const std::string& text, bool add_special_tokens) const {
  if (!tokenizer_) {
    return FailedPrecondition("text prompts need the model's tokenizer.json, which this server has not loaded; "
                              "send token ids");
  }
  RS_ASSIGN_OR_RETURN(tok::Encoding e, tokenizer_->Encode(text, add_special_tokens));
  return std::vector<std::int64_t>(e.ids.begin(), e.ids.end());
}

StatusOr<std::string> ModelService::ApplyChatTemplate(const nlohmann::ordered_json& messages,
                                                      bool add_generation_prompt,
                                                      const nlohmann::ordered_json& extra) const {
  if (!chat_template_) {
    return FailedPrecondition("the model has no chat template (tokenizer_config.json 'chat_template'); "
                              "use /v1/completions");
  }
  ChatTemplateOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.bos_token = tokenizer_->config().bos_token;
  o.eos_token = tokenizer_->config().eos_token;
  o.extra = extra;
  return chat_template_->Render(messages, o);
}

std::string ModelService::NextRequestId(const char* prefix) {
  return std::string(prefix) + "-" + std::to_string(++counter_);
}

}  // namespace ropeserve::api
