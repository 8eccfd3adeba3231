#include "server/api/model_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <condition_variable>
#include <mutex>

#include "server/models/decoder.h"
#include "server/runner/model_runner.h"

namespace ropeserve::api {

namespace {

// A test hook for black-box fault tests: with ROPESERVE_INJECT_FAULTS=N in
// the environment, every N-th forward throws, as LibTorch does when an
// allocation fails. Announced loudly at start-up; never set it in
// production.
class FaultInjector final : public ModelExecutor {
 public:
  FaultInjector(ModelExecutor& inner, std::int64_t every) : inner_(inner), every_(every) {}
  StatusOr<StepLogits> Execute(const StepPlan& plan) override {
    if (++calls_ % every_ == 0) throw std::runtime_error("injected fault (ROPESERVE_INJECT_FAULTS)");
    return inner_.Execute(plan);
  }
  std::int64_t vocab_size() const override { return inner_.vocab_size(); }

 private:
  ModelExecutor& inner_;
  std::int64_t every_;
  std::int64_t calls_ = 0;
};

}  // namespace

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
  ModelExecutor* executor = s->runner_.get();
  if (const char* f = std::getenv("ROPESERVE_INJECT_FAULTS"); f != nullptr && std::atoll(f) > 0) {
    spdlog::warn("*** ROPESERVE_INJECT_FAULTS={}: every {}th forward fails (a test hook) ***", f, std::atoll(f));
    s->fault_injector_ = std::make_unique<FaultInjector>(*s->runner_, std::atoll(f));
    executor = s->fault_injector_.get();
  }
  EngineConfig ec;
  ec.scheduler = options.scheduler;
  if (!(options.qa_token_share >= 0 && options.qa_token_share < 1))
    return InvalidArgument("the QA token share must be in [0, 1)");
  ec.encoder_token_share = options.qa_token_share;
  ec.num_blocks = static_cast<int>(s->kv_.num_blocks);
  ec.block_size = options.block_size;
  ec.eos_token_ids.assign(c.eos_token_ids.begin(), c.eos_token_ids.end());
  s->engine_ = std::make_unique<Engine>(ec, *executor);
  if (options.max_request_tokens < 0) return InvalidArgument("--max-request-tokens must not be negative");
  s->limits_.max_model_len = s->max_model_len_;
  s->limits_.vocab_size = c.vocab_size;
  s->limits_.max_request_tokens = options.max_request_tokens > 0 ? options.max_request_tokens : s->kv_.tokens;
  if (options.observer != nullptr) s->engine_->SetObserver(options.observer);
  s->options_ = options;
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

StatusOr<std::unique_ptr<Generation>> ModelService::Start(const std::vector<std::int64_t>& prompt_ids,
                                                        const GenerateOptions& options) {
  // `options` went through service::ValidateGeneration; the engine checks
  // what it relies on again (ids, ranges) at admission.
  if (!(options.timeout_seconds >= 0)) return InvalidArgument("the request timeout must not be negative");
  EngineRequest r;
  for (auto id : prompt_ids) {
    if (id < 0 || id >= config().vocab_size)
      return InvalidArgument("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(config().vocab_size) + ")");
    r.prompt.push_back(static_cast<TokenId>(id));
  }
  r.max_tokens = options.max_tokens;
  r.min_tokens = options.min_tokens;
  for (auto id : options.stop_token_ids) {
    if (id < 0 || id >= config().vocab_size) return InvalidArgument("stop_token_ids: " + std::to_string(id) + " is outside the vocabulary");
    r.stop_token_ids.push_back(static_cast<TokenId>(id));
  }
  r.sampling = options.sampling;
  r.ignore_eos = options.ignore_eos;
  r.top_logprobs = options.top_logprobs;
  if (options.timeout_seconds > 0) {
    r.timeout = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::min(options.timeout_seconds, 1e7)));
  }
  if (!options.stop.empty() && !tokenizer_) {
    return FailedPrecondition("'stop' strings need the model's tokenizer.json, which this server has not loaded");
  }
  for (const auto& st : options.stop) {
    if (st.empty()) return InvalidArgument("'stop' strings must not be empty");
  }
  std::unique_ptr<Generation> g(new Generation());
  RS_ASSIGN_OR_RETURN(g->stream_, engine_->Submit(std::move(r)));
  g->engine_ = engine_.get();
  g->options_ = options;
  g->prompt_size_ = prompt_ids.size();
  if (tokenizer_) g->detok_.emplace(tokenizer_, /*skip_special_tokens=*/true);
  for (const auto& st : options.stop) {
    Generation::StopMatcher m;
    m.stop = st;
    m.fail.assign(st.size(), 0);  // fail[i]: longest proper border of st[0..i]
    for (std::size_t i = 1, k = 0; i < st.size(); ++i) {
      while (k > 0 && st[i] != st[k]) k = m.fail[k - 1];
      if (st[i] == st[k]) ++k;
      m.fail[i] = k;
    }
    g->stops_.push_back(std::move(m));
  }
  return g;
}

Generation::~Generation() {
  if (!finished_ && stream_) engine_->Cancel(stream_->id());
}

void Generation::Cancel() {
  if (!finished_ && stream_) engine_->Cancel(stream_->id());
}

void Generation::SetNotify(std::function<void()> fn, bool call_if_ready) {
  stream_->SetNotify(std::move(fn), call_if_ready);
}

void Generation::Release(Delta& out, bool all) {
  std::size_t end = text_.size();
  if (!all) {
    // Hold back the longest tail of the text that begins some stop string.
    std::size_t hold = 0;
    for (const auto& m : stops_) hold = std::max(hold, m.state);
    end -= std::min(hold, text_.size() - released_);
    // Never split a UTF-8 sequence (a stop string may start mid-character).
    while (end > released_ && end < text_.size() && (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) --end;
  }
  if (end > released_) {
    out.text.append(text_, released_, end - released_);
    released_ = end;
  }
}

StatusOr<Generation::Delta> Generation::Next(std::optional<std::chrono::milliseconds> timeout) {
  Delta out;
  if (finished_) return out;
  StreamChunk c = stream_->Next(timeout ? std::optional<Clock::duration>(*timeout) : std::nullopt);
  for (auto& t : c.tokens) {
    if (stopped_) break;  // tokens already in flight when we cancelled
    ++generated_;
    out.ids.push_back(t.id);
    out.logprobs.push_back(t.logprob);
    if (options_.top_logprobs > 0) {
      std::vector<TokenLogprob> top;
      for (auto [id, lp] : t.top_logprobs) top.push_back({id, lp});
      out.top_logprobs.push_back(std::move(top));
    }
    if (!detok_) continue;
    const std::size_t before = text_.size();
    RS_ASSIGN_OR_RETURN(std::string piece, detok_->Push(static_cast<uint32_t>(t.id)));
    text_ += piece;
    // Advance the stop automata over the new bytes; the earliest-starting
    // stop string completed in them (it may begin in earlier pieces) cuts
    // the text. Stop strings count only from min_tokens on (as vLLM).
    std::size_t cut = std::string::npos;
    for (auto& m : stops_) {
      for (std::size_t i = before; i < text_.size(); ++i) {
        while (m.state > 0 && text_[i] != m.stop[m.state]) m.state = m.fail[m.state - 1];
        if (text_[i] == m.stop[m.state]) ++m.state;
        if (m.state == m.stop.size()) {
          if (generated_ >= options_.min_tokens) cut = std::min(cut, i + 1 - m.stop.size());
          m.state = m.fail[m.state - 1];
        }
      }
    }
    if (cut != std::string::npos) {
      text_.resize(std::max(cut, released_));
      stopped_ = true;
      engine_->Cancel(stream_->id());
    }
  }
  if (!c.finished) {
    Release(out, /*all=*/false);
    return out;
  }
  finished_ = true;
  out.prompt_tokens = c.prompt_tokens;
  out.cached_tokens = c.cached_tokens;
  if (stopped_) {
    out.finish_reason = "stop";
  } else if (c.finish_reason == "error") {
    return c.error;
  } else if (c.finish_reason == "deadline") {
    return Status(ErrorCode::kDeadlineExceeded, "request timed out");
  } else if (c.finish_reason == "cancelled") {
    return Status(ErrorCode::kCancelled, "request cancelled");
  } else {
    if (detok_) {
      RS_ASSIGN_OR_RETURN(std::string rest, detok_->Finish());
      text_ += rest;
    }
    out.finish_reason = c.finish_reason;
  }
  Release(out, /*all=*/true);
  out.finished = true;
  return out;
}

StatusOr<GenerateResult> ModelService::Collect(Generation& g, bool (*abandoned)()) {
  GenerateResult result;
  while (true) {
    if (abandoned != nullptr && abandoned()) {
      g.Cancel();
      return Status(ErrorCode::kCancelled, "the client disconnected");
    }
    RS_ASSIGN_OR_RETURN(Generation::Delta d,
                        abandoned != nullptr ? g.Next(std::chrono::milliseconds(200)) : g.Next());
    result.generated_ids.insert(result.generated_ids.end(), d.ids.begin(), d.ids.end());
    result.logprobs.insert(result.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    for (auto& t : d.top_logprobs) result.top_logprobs.push_back(std::move(t));
    result.text += d.text;
    if (d.finished) {
      result.finish_reason = d.finish_reason;
      result.cached_tokens = d.cached_tokens;
      return result;
    }
  }
}

StatusOr<std::vector<GenerateResult>> ModelService::CollectAll(std::vector<std::unique_ptr<Generation>>& gens,
                                                              bool (*abandoned)()) {
  std::vector<GenerateResult> out;
  for (auto& g : gens) {
    // An error drops `gens` with the caller, which cancels the others.
    RS_ASSIGN_OR_RETURN(GenerateResult r, Collect(*g, abandoned));
    out.push_back(std::move(r));
  }
  return out;
}

StatusOr<GenerateResult> ModelService::Generate(const std::vector<std::int64_t>& prompt_ids,
                                                const GenerateOptions& options) {
  RS_ASSIGN_OR_RETURN(auto results, GenerateN(prompt_ids, options, 1));
  return std::move(results[0]);
}

StatusOr<std::vector<GenerateResult>> ModelService::GenerateN(const std::vector<std::int64_t>& prompt_ids,
                                                              const GenerateOptions& options, int n) {
  RS_ASSIGN_OR_RETURN(auto gens, StartN(prompt_ids, options, n));
  RS_ASSIGN_OR_RETURN(auto out, CollectAll(gens));
  for (auto& r : out) r.prompt_ids = prompt_ids;
  return out;
}

StatusOr<std::vector<std::unique_ptr<Generation>>> ModelService::StartN(const std::vector<std::int64_t>& prompt_ids,
                                                                       const GenerateOptions& options, int n) {
  if (n < 1 || n > service::kMaxChoices)
    return InvalidArgument("'n' must be between 1 and " + std::to_string(service::kMaxChoices));
  std::vector<std::unique_ptr<Generation>> gens;
  RS_ASSIGN_OR_RETURN(auto first, Start(prompt_ids, options));
  gens.push_back(std::move(first));
  if (n == 1) return gens;
  // The first choice runs alone until its prompt is prefilled, so that the
  // others find the prompt's full blocks in the prefix cache: wait for its
  // first token (the stream keeps it for the caller's reads).
  {
    // Shared: the engine thread may still hold a copy of the callback.
    struct Signal {
      std::mutex mu;
      std::condition_variable cv;
      bool ready = false;
    };
    auto sig = std::make_shared<Signal>();
    gens[0]->SetNotify([sig] {
      std::lock_guard<std::mutex> lock(sig->mu);
      sig->ready = true;
      sig->cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(sig->mu);
    sig->cv.wait(lock, [&] { return sig->ready; });
  }
  gens[0]->SetNotify(nullptr);
  // Choice i uses seed + i when a seed is given (different samples,
  // reproducible). Destroying `gens` on an error cancels what started.
  for (int i = 1; i < n; ++i) {
    GenerateOptions o = options;
    if (o.sampling.seed) o.sampling.seed = *o.sampling.seed + static_cast<std::uint64_t>(i);
    RS_ASSIGN_OR_RETURN(auto g, Start(prompt_ids, o));
    gens.push_back(std::move(g));
  }
  return gens;
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

std::string ModelService::dtype() const { return DTypeSafetensorsName(model_->dtype()); }

StatusOr<std::vector<std::int64_t>> ModelService::SummaryPrompt(const std::string& text,
                                                                const std::string& instruction) const {
  if (text.empty()) return InvalidArgument("'text' must not be empty");
  const std::string task = instruction.empty() ? kDefaultSummaryInstruction : instruction;
  if (chat_template_) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", task + "\n\n" + text}});
    RS_ASSIGN_OR_RETURN(std::string prompt, ApplyChatTemplate(messages, true, nlohmann::ordered_json::object()));
    return Tokenize(prompt, /*add_special_tokens=*/false);
  }
  return Tokenize(task + "\n\n" + text + "\n\nSummary:", /*add_special_tokens=*/true);
}

std::string ModelService::NextRequestId(const char* prefix) {
  return std::string(prefix) + "-" + std::to_string(++counter_);
}

}  // namespace ropeserve::api
