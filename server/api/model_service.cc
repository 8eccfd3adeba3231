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

struct ModelService::Pending {
  std::shared_ptr<RequestStream> stream;
  GenerateOptions options;
  GenerateResult result;
  std::optional<tok::IncrementalDecoder> detok;
  size_t max_stop = 0;
  bool stopped = false;
};

StatusOr<std::unique_ptr<ModelService::Pending>> ModelService::Start(const std::vector<std::int64_t>& prompt_ids,
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
  auto p = std::make_unique<Pending>();
  RS_ASSIGN_OR_RETURN(p->stream, engine_->Submit(std::move(r)));
  p->options = options;
  p->result.prompt_ids = prompt_ids;
  if (tokenizer_) p->detok.emplace(tokenizer_, /*skip_special_tokens=*/true);
  for (const auto& st : options.stop) p->max_stop = std::max(p->max_stop, st.size());
  return p;
}

StatusOr<GenerateResult> ModelService::Collect(Pending& p, const std::function<void()>& on_first_token) {
  const GenerateOptions& options = p.options;
  GenerateResult& result = p.result;
  bool first = true;
  for (;;) {
    StreamChunk c = p.stream->Next();
    for (auto& t : c.tokens) {
      if (p.stopped) break;  // tokens already in flight when we cancelled
      result.generated_ids.push_back(t.id);
      result.logprobs.push_back(t.logprob);
      if (options.top_logprobs > 0) {
        std::vector<TokenLogprob> top;
        for (auto [id, lp] : t.top_logprobs) top.push_back({id, lp});
        result.top_logprobs.push_back(std::move(top));
      }
      if (p.detok) {
        const size_t before = result.text.size();
        RS_ASSIGN_OR_RETURN(std::string piece, p.detok->Push(static_cast<uint32_t>(t.id)));
        result.text += piece;
        // A stop string may straddle the previous piece; stop strings count
        // only from min_tokens on (as vLLM).
        const size_t from = before > p.max_stop ? before - p.max_stop : 0;
        size_t cut = std::string::npos;
        if (static_cast<std::int64_t>(result.generated_ids.size()) >= options.min_tokens) {
          for (const auto& st : options.stop) cut = std::min(cut, result.text.find(st, from));
        }
        if (cut != std::string::npos) {
          result.text.resize(cut);
          p.stopped = true;
          engine_->Cancel(p.stream->id());
        }
      }
    }
    if (first && !c.tokens.empty()) {
      first = false;
      if (on_first_token) on_first_token();
    }
    if (!c.finished) continue;
    if (p.stopped) {
      result.finish_reason = "stop";
      return result;
    }
    if (c.finish_reason == "error") return c.error;
    if (c.finish_reason == "deadline") return Status(ErrorCode::kDeadlineExceeded, "request timed out");
    if (c.finish_reason == "cancelled") return Status(ErrorCode::kCancelled, "request cancelled");
    if (p.detok) {
      RS_ASSIGN_OR_RETURN(std::string rest, p.detok->Finish());
      result.text += rest;
    }
    result.finish_reason = c.finish_reason;
    return result;
  }
}

StatusOr<GenerateResult> ModelService::Generate(const std::vector<std::int64_t>& prompt_ids,
                                                const GenerateOptions& options) {
  RS_ASSIGN_OR_RETURN(auto p, Start(prompt_ids, options));
  return Collect(*p, nullptr);
}

StatusOr<std::vector<GenerateResult>> ModelService::GenerateN(const std::vector<std::int64_t>& prompt_ids,
                                                              const GenerateOptions& options, int n) {
  if (n < 1 || n > kMaxChoices) return InvalidArgument("'n' must be between 1 and " + std::to_string(kMaxChoices));
  if (n == 1) {
    RS_ASSIGN_OR_RETURN(auto r, Generate(prompt_ids, options));
    return std::vector<GenerateResult>{std::move(r)};
  }
  // The first choice runs alone until its prompt is prefilled, so that the
  // others find the prompt's full blocks in the prefix cache. Choice i uses
  // seed + i when a seed is given (different samples, reproducible).
  RS_ASSIGN_OR_RETURN(auto first, Start(prompt_ids, options));
  std::vector<std::unique_ptr<Pending>> rest;
  Status start_error;
  auto start_rest = [&] {
    for (int i = 1; i < n; ++i) {
      GenerateOptions o = options;
      if (o.sampling.seed) o.sampling.seed = *o.sampling.seed + static_cast<std::uint64_t>(i);
      auto p = Start(prompt_ids, o);
      if (!p.ok()) {
        start_error = p.status();
        return;
      }
      rest.push_back(std::move(*p));
    }
  };
  auto r0 = Collect(*first, start_rest);
  if (!r0.ok() || !start_error.ok()) {
    for (auto& p : rest) engine_->Cancel(p->stream->id());
    for (auto& p : rest) (void)Collect(*p, nullptr);
    return !r0.ok() ? r0.status() : start_error;
  }
  if (rest.empty()) start_rest();  // defensive: the hook runs with the first token
  if (!start_error.ok()) {
    for (auto& p : rest) engine_->Cancel(p->stream->id());
    for (auto& p : rest) (void)Collect(*p, nullptr);
    return start_error;
  }
  std::vector<GenerateResult> out;
  out.push_back(std::move(*r0));
  Status err;
  for (auto& p : rest) {
    auto r = Collect(*p, nullptr);
    if (!r.ok() && err.ok()) err = r.status();
    if (r.ok()) out.push_back(std::move(*r));
  }
  if (!err.ok()) return err;
  return out;
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
