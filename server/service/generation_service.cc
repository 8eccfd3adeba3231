#include "server/service/generation_service.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "server/common/ready_signal.h"
#include "server/sampler/logits_processors.h"
#include "server/service/reasoning.h"
#include "server/structured/grammar.h"

namespace ropeserve::service {

GenerationService::~GenerationService() {
  if (engine_) engine_->Stop();
}

StatusOr<std::unique_ptr<GenerationService>> GenerationService::Create(
    GenerationServiceConfig config, std::unique_ptr<ModelExecutor> executor,
    std::shared_ptr<const tok::Tokenizer> tokenizer) {
  if (!executor) return InvalidArgument("the generation service needs a model executor");
  if (config.requests.max_request_tokens < 0) return InvalidArgument("--max-request-tokens must not be negative");
  RS_RETURN_IF_ERROR(config.engine.scheduler.Validate());
  std::unique_ptr<GenerationService> s(new GenerationService());
  s->limits_.max_model_len = config.engine.scheduler.max_model_len;
  s->limits_.vocab_size = config.model.vocab_size;
  s->limits_.max_request_tokens =
      config.requests.max_request_tokens > 0 ? config.requests.max_request_tokens : config.kv.tokens;
  s->limits_.priority_scheduling = config.requests.priority_scheduling;
  s->limits_.max_document_bytes = config.requests.max_document_bytes;
  s->tokenizer_ = std::move(tokenizer);
  if (s->tokenizer_ && s->tokenizer_->config().chat_template) {
    RS_ASSIGN_OR_RETURN(auto t, ChatTemplate::FromSource(*s->tokenizer_->config().chat_template));
    s->chat_template_ = std::move(t);
    s->reasons_ = ReasoningSplitter::ForTemplate(*s->tokenizer_->config().chat_template);
    s->tool_format_ = ToolFormatForTemplate(*s->tokenizer_->config().chat_template);
  }
  s->executor_ = std::move(executor);
  s->engine_ = std::make_unique<Engine>(config.engine, *s->executor_);
  if (config.observer != nullptr) s->engine_->SetObserver(config.observer);
  s->config_ = std::move(config);
  if (s->config_.engine_thread) s->engine_->Start();
  return s;
}

Status GenerationService::CheckModelName(const std::string& requested) const {
  if (requested.empty() || requested == name()) return Status::Ok();
  return NotFound("model '" + requested + "' does not exist (served: '" + name() + "')")
      .WithParam("model")
      .WithReason("model_not_found");
}

StatusOr<std::unique_ptr<Generation>> GenerationService::Start(const std::vector<std::int64_t>& prompt_ids,
                                                               const ValidatedGeneration& validated,
                                                               Admission admission) {
  // The options were validated once, by ValidateGeneration (the only maker
  // of a ValidatedGeneration), for prompts up to longest_prompt() tokens;
  // ids by the input processor (input_processor.h). What is checked below
  // is a caller's bug, refused as an internal error. An id that does not fit
  // a TokenId is kept out of range here, never wrapped into a valid one, so
  // the engine's assertion refuses it.
  const GenerateOptions& options = validated.options();
  if (prompt_ids.empty() || prompt_ids.size() > validated.longest_prompt())
    return Internal("internal error: a prompt of " + std::to_string(prompt_ids.size()) +
                    " tokens reached Start with options validated for prompts of 1 to " +
                    std::to_string(validated.longest_prompt()) + " tokens");
  EngineRequest r;
  r.prompt.reserve(prompt_ids.size());
  for (auto id : prompt_ids)
    r.prompt.push_back(id >= 0 && id <= std::numeric_limits<TokenId>::max() ? static_cast<TokenId>(id) : TokenId{-1});
  r.max_tokens = options.max_tokens;
  r.stop.min_tokens = options.min_tokens;
  for (auto id : options.stop_token_ids)  // one outside the vocabulary never matches
    if (id >= 0 && id <= std::numeric_limits<TokenId>::max()) r.stop.stop_token_ids.push_back(static_cast<TokenId>(id));
  r.sampling = options.sampling;
  std::vector<std::shared_ptr<LogitsProcessor>> processors;
  if (!options.logit_bias.empty()) {
    processors.push_back(std::make_shared<LogitBias>(options.logit_bias));
  }
  if (!options.allowed_token_ids.empty()) {
    std::vector<TokenId> ids;  // validated: in the vocabulary
    for (auto id : options.allowed_token_ids) ids.push_back(static_cast<TokenId>(id));
    processors.push_back(std::make_shared<AllowedTokens>(std::move(ids)));
  }
  if (!options.bad_words.empty()) {
    RS_ASSIGN_OR_RETURN(auto sequences, BadWordSequences(options.bad_words));
    processors.push_back(std::make_shared<BadWords>(std::move(sequences)));
  }
  if (!options.constraint.empty()) {
    RS_ASSIGN_OR_RETURN(auto grammar, CompileConstraint(options.constraint));
    // One per choice: it follows its sequence's tokens.
    processors.push_back(std::make_shared<structured::GrammarProcessor>(std::move(grammar), options.max_tokens));
  }
  if (processors.size() == 1)
    r.processor = std::move(processors[0]);
  else if (!processors.empty())
    r.processor = std::make_shared<ProcessorChain>(std::move(processors));
  r.stop.ignore_eos = options.ignore_eos;
  r.speculative = options.speculative;
  r.priority = options.priority;
  r.top_logprobs = options.top_logprobs;
  r.prompt_logprobs = options.prompt_logprobs;
  r.trace = options.trace;
  if (options.timeout_seconds > 0) {
    r.timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.timeout_seconds));
  }
  if (!options.stop.empty() && !tokenizer_)
    return FailedPrecondition("'stop' strings need the model's tokenizer.json, which this server has not loaded");
  RS_ASSIGN_OR_RETURN(auto stream, engine_->Submit(std::move(r)));
  // Submit never waits; a caller that must answer a refusal (queue full,
  // can never run) before anything else waits for the verdict here. An
  // offline engine gives its verdict at its next step: Next() reports it.
  if (admission == Admission::kWait && config_.engine_thread) RS_RETURN_IF_ERROR(stream->WaitAdmission());
  return std::unique_ptr<Generation>(
      new Generation(*engine_, std::move(stream), options, prompt_ids.size(), tokenizer_));
}

// vLLM's tokenization of bad words: each word without its leading
// whitespace, and with one space before it when that gives as many tokens
// and another first token (the word inside a text, for tokenizers that
// mark spaces on the next word).
StatusOr<std::vector<std::vector<TokenId>>> GenerationService::BadWordSequences(
    const std::vector<std::string>& words) const {
  if (!tokenizer_)
    return FailedPrecondition("'bad_words' need the model's tokenizer.json, which this server has not loaded")
        .WithParam("bad_words");
  std::vector<std::vector<TokenId>> out;
  std::size_t total = 0;
  for (const std::string& word : words) {
    const std::string bare = word.substr(std::min(word.size(), word.find_first_not_of(" \t\n\r\f\v")));
    std::vector<TokenId> plain;
    for (const bool space : {false, true}) {
      RS_ASSIGN_OR_RETURN(tok::Encoding e, tokenizer_->Encode(space ? " " + bare : bare, /*add_special_tokens=*/false));
      std::vector<TokenId> ids(e.ids.begin(), e.ids.end());
      if (ids.empty()) continue;
      if (!space) {
        plain = ids;
      } else if (plain.empty() || ids.size() != plain.size() || ids[0] == plain[0]) {
        continue;
      }
      for (TokenId id : ids)
        if (id < 0 || id >= config_.model.vocab_size)
          return InvalidArgument("bad word '" + word.substr(0, 50) + "' has a token outside the model's vocabulary")
              .WithParam("bad_words");
      total += ids.size();
      if (total > kMaxBadWordTokens)
        return InvalidArgument("'bad_words' may come to at most " + std::to_string(kMaxBadWordTokens) + " tokens")
            .WithParam("bad_words");
      out.push_back(std::move(ids));
    }
  }
  return out;
}

StatusOr<std::shared_ptr<const structured::CompiledGrammar>> GenerationService::CompileConstraint(
    const structured::Constraint& c) {
  if (!tokenizer_)
    return FailedPrecondition("structured output needs the model's tokenizer.json, which this server has not loaded")
        .WithParam(c.param);
  if (config_.engine.eos_token_ids.empty())
    return FailedPrecondition("structured output needs an EOS token (eos_token_id in config.json) to end the output")
        .WithParam(c.param);
  std::call_once(grammars_once_, [&] {
    grammars_ = std::make_unique<structured::GrammarCompiler>(structured::TokenVocabulary::FromTokenizer(
        *tokenizer_, static_cast<std::size_t>(config_.model.vocab_size), config_.engine.eos_token_ids));
  });
  return grammars_->Get(c);
}

Status GenerationService::AwaitOutput(Generation& g) {
  // Shared: the engine thread may still hold a copy of the callback.
  auto sig = std::make_shared<ReadySignal>();
  g.SetNotify([sig] { sig->Set(); });
  if (config_.engine_thread) {
    sig->Wait();
  } else {
    while (!sig->IsSet()) {
      if (!engine_->RunOnce()) {
        g.SetNotify(nullptr);
        return Internal("the engine went idle before the request produced output");
      }
    }
  }
  g.SetNotify(nullptr);
  return Status::Ok();
}

StatusOr<std::vector<std::unique_ptr<Generation>>> GenerationService::StartN(
    const std::vector<std::int64_t>& prompt_ids, const ValidatedGeneration& validated) {
  const int n = validated.n();
  std::vector<std::unique_ptr<Generation>> gens;
  RS_ASSIGN_OR_RETURN(auto first, Start(prompt_ids, validated.Choice(0)));
  gens.push_back(std::move(first));
  if (n == 1) return gens;
  // The first choice runs alone until its prompt is prefilled, so that the
  // others find the prompt's full blocks in the prefix cache: wait for its
  // first token (the stream keeps it for the caller's reads).
  RS_RETURN_IF_ERROR(AwaitOutput(*gens[0]));
  // Destroying `gens` on an error cancels what started.
  for (int i = 1; i < n; ++i) {
    RS_ASSIGN_OR_RETURN(auto g, Start(prompt_ids, validated.Choice(i)));
    gens.push_back(std::move(g));
  }
  return gens;
}

StatusOr<std::vector<GenerateResult>> GenerationService::RunToEnd(std::vector<std::unique_ptr<Generation>>& gens,
                                                                  const OnDelta& on_delta) {
  using SteadyClock = std::chrono::steady_clock;
  const auto start = SteadyClock::now();
  std::vector<GenerateResult> out(gens.size());
  std::vector<std::optional<SteadyClock::time_point>> first(gens.size()), last(gens.size());
  // One read of generation i; false when it has ended.
  auto read = [&](std::size_t i, std::optional<std::chrono::milliseconds> timeout) -> StatusOr<bool> {
    RS_ASSIGN_OR_RETURN(Generation::Delta d, gens[i]->Next(timeout));
    const auto now = SteadyClock::now();
    if (!d.ids.empty()) {
      if (!first[i]) first[i] = now;
      last[i] = now;
    }
    // on_delta sees the delta before Append moves its top logprobs out.
    if (on_delta && (!d.ids.empty() || !d.text.empty() || d.finished)) on_delta(i, d);
    return !Generation::Append(out[i], d);
  };
  Status failed;
  if (config_.engine_thread) {
    for (std::size_t i = 0; i < gens.size() && failed.ok(); ++i) {
      for (;;) {
        auto more = read(i, std::nullopt);
        if (!more.ok()) failed = more.status();
        if (!more.ok() || !*more) break;
      }
    }
  } else {
    std::vector<bool> open(gens.size(), true);
    std::size_t remaining = gens.size();
    while (remaining > 0 && failed.ok()) {
      const bool worked = engine_->RunOnce();
      for (std::size_t i = 0; i < gens.size() && failed.ok(); ++i) {
        if (!open[i]) continue;
        auto more = read(i, std::chrono::milliseconds(0));
        if (!more.ok())
          failed = more.status();
        else if (!*more)
          open[i] = false, --remaining;
      }
      if (!worked && remaining > 0 && failed.ok()) failed = Internal("the engine went idle before a request ended");
    }
  }
  if (!failed.ok()) {
    gens.clear();                                         // cancels the others
    if (!config_.engine_thread) engine_->RunUntilIdle();  // leave the engine empty for the next call
    return failed;
  }
  const auto done = SteadyClock::now();
  for (std::size_t i = 0; i < gens.size() && !config_.engine_thread; ++i) {
    const auto first_token = first[i].value_or(done);
    out[i].prefill_seconds = std::chrono::duration<double>(first_token - start).count();
    out[i].decode_seconds = std::chrono::duration<double>(last[i].value_or(done) - first_token).count();
  }
  return out;
}

StatusOr<GenerateResult> GenerationService::Generate(const std::vector<std::int64_t>& prompt_ids,
                                                     const ValidatedGeneration& validated) {
  RS_ASSIGN_OR_RETURN(auto results, GenerateBatch({prompt_ids}, validated));
  return std::move(results[0]);
}

StatusOr<std::vector<GenerateResult>> GenerationService::GenerateN(const std::vector<std::int64_t>& prompt_ids,
                                                                   const ValidatedGeneration& validated) {
  RS_ASSIGN_OR_RETURN(auto gens, StartN(prompt_ids, validated));
  RS_ASSIGN_OR_RETURN(auto out, RunToEnd(gens, nullptr));
  for (auto& r : out) r.prompt_ids = prompt_ids;
  return out;
}

StatusOr<std::vector<GenerateResult>> GenerationService::GenerateBatch(
    const std::vector<std::vector<std::int64_t>>& prompts, const ValidatedGeneration& validated, bool seed_offsets,
    const OnDelta& on_delta) {
  std::vector<std::unique_ptr<Generation>> gens;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    auto g = Start(prompts[i], seed_offsets ? validated.WithSeedOffset(i) : validated);
    if (!g.ok()) {
      gens.clear();
      if (!config_.engine_thread) engine_->RunUntilIdle();
      return g.status();
    }
    gens.push_back(std::move(*g));
  }
  RS_ASSIGN_OR_RETURN(auto out, RunToEnd(gens, on_delta));
  for (std::size_t i = 0; i < out.size(); ++i) out[i].prompt_ids = prompts[i];
  return out;
}

StatusOr<std::vector<std::int64_t>> GenerationService::Tokenize(const std::string& text, bool add_special_tokens,
                                                                std::size_t keep_last) const {
  if (!tokenizer_) {
    return FailedPrecondition(
        "text prompts need the model's tokenizer.json, which this server has not loaded; "
        "send token ids");
  }
  RS_ASSIGN_OR_RETURN(tok::Encoding e, tokenizer_->Encode(text, add_special_tokens));
  if (keep_last == 0 || e.ids.size() <= keep_last) return std::vector<std::int64_t>(e.ids.begin(), e.ids.end());
  RS_ASSIGN_OR_RETURN(const std::vector<std::size_t> kept, KeptByLeftTruncation(e, keep_last));
  std::vector<std::int64_t> out;
  out.reserve(kept.size());
  for (std::size_t i : kept) out.push_back(e.ids[i]);
  return out;
}

StatusOr<std::vector<std::size_t>> KeptByLeftTruncation(const tok::Encoding& e, std::size_t keep_last) {
  // What the tokenizer's left truncation keeps, without its overflowing
  // windows (copies of the whole text we would throw away): the added
  // special tokens (sequence id -1) where they are, and the text's last
  // keep_last - (their number) tokens.
  const auto added = static_cast<std::size_t>(std::count(e.sequence_ids.begin(), e.sequence_ids.end(), -1));
  if (e.ids.size() > keep_last && added >= keep_last)
    return InvalidArgument("'truncate_prompt_tokens' (" + std::to_string(keep_last) + ") leaves no room next to the " +
                           std::to_string(added) + " special tokens the tokenizer adds")
        .WithParam("truncate_prompt_tokens");
  std::size_t drop = e.ids.size() > keep_last ? e.ids.size() - keep_last : 0;  // the text's first tokens
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < e.ids.size(); ++i) {
    const bool special = i < e.sequence_ids.size() && e.sequence_ids[i] == -1;
    if (!special && drop > 0) {
      --drop;
      continue;
    }
    out.push_back(i);
  }
  return out;
}

StatusOr<std::string> GenerationService::Detokenize(const std::vector<std::int64_t>& ids,
                                                    bool skip_special_tokens) const {
  if (!tokenizer_) return FailedPrecondition("this server has not loaded the model's tokenizer.json: no text");
  // The API reads int64 so that an id past TokenId's range is reported,
  // not wrapped.
  std::vector<TokenId> narrow;
  narrow.reserve(ids.size());
  for (auto id : ids) {
    if (id < 0 || id > static_cast<std::int64_t>(INT32_MAX))
      return InvalidArgument("token id " + std::to_string(id) + " is not in the vocabulary");
    narrow.push_back(static_cast<TokenId>(id));
  }
  return tokenizer_->Decode(narrow, skip_special_tokens);  // InvalidArgument for an unknown id
}

StatusOr<std::string> GenerationService::ApplyChatTemplate(const nlohmann::ordered_json& messages,
                                                           bool add_generation_prompt,
                                                           const nlohmann::ordered_json& extra) const {
  if (!chat_template_) {
    return FailedPrecondition(
        "the model has no chat template (tokenizer_config.json 'chat_template'); "
        "use /v1/completions");
  }
  ChatTemplateOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.bos_token = tokenizer_->config().bos_token;
  o.eos_token = tokenizer_->config().eos_token;
  o.extra = extra;
  return chat_template_->Render(messages, o);
}

StatusOr<std::vector<std::int64_t>> GenerationService::SummaryPrompt(const std::string& text,
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

std::string GenerationService::NextRequestId(const char* prefix) {
  return std::string(prefix) + "-" + std::to_string(++counter_);
}

}  // namespace ropeserve::service
