#include "server/service/encoder_service.h"

#include <algorithm>
#include <chrono>

#include "server/service/window_job.h"

namespace ropeserve::service {

struct EncoderService::Impl {
  std::unique_ptr<SpanModel> model;
  std::shared_ptr<const tok::Tokenizer> tokenizer;
  embedding::EmbeddingConfig pooling;
  EncoderServiceOptions options;
  std::unique_ptr<EncoderLane> lane;  // last: it stops before the model goes
};

EncoderService::~EncoderService() = default;

StatusOr<std::unique_ptr<EncoderService>> EncoderService::Create(std::unique_ptr<SpanModel> model,
                                                                 std::shared_ptr<const tok::Tokenizer> tokenizer,
                                                                 std::string served_name,
                                                                 embedding::EmbeddingConfig pooling,
                                                                 EncoderServiceOptions options) {
  if (!model || !tokenizer) return InvalidArgument("the encoder service needs a model and its tokenizer");
  const EncoderHead head = model->config().head;
  if (head == EncoderHead::kSpan)
    return InvalidArgument(model->config().architecture +
                           " has a head for extractive QA: serve it with --qa (--encoder takes base models for "
                           "embeddings, sequence and token classifiers)");
  std::unique_ptr<EncoderService> s(new EncoderService());
  s->impl_ = std::make_unique<Impl>();
  s->name_ = std::move(served_name);
  Impl& impl = *s->impl_;
  impl.options = options;
  impl.model = std::move(model);
  impl.tokenizer = std::move(tokenizer);
  impl.pooling = std::move(pooling);
  RS_ASSIGN_OR_RETURN(impl.lane, EncoderLane::Create(*impl.model, options.engine, options.max_queue_requests,
                                                     options.max_batch_tokens, "encoder"));
  return s;
}

const EncoderConfig& EncoderService::config() const { return impl_->model->config(); }
const embedding::EmbeddingConfig& EncoderService::pooling() const { return impl_->pooling; }
const tok::Tokenizer& EncoderService::tokenizer() const { return *impl_->tokenizer; }

std::int64_t EncoderService::max_input_tokens() const {
  const std::int64_t limit = config().max_position_embeddings;
  return impl_->pooling.max_seq_length ? std::min(limit, *impl_->pooling.max_seq_length) : limit;
}

// A call's inputs: tokenized and queued by Prepare, turned into results by
// the task's Finish.
struct EncoderService::Prepared {
  std::shared_ptr<WindowJob> job;  // one call's inputs
  std::vector<std::int64_t> skip;  // per input: leading tokens the pooling leaves out
  // Token classification: each input's text and encoding (offsets, tokens).
  std::vector<std::string> texts;
  std::vector<tok::Encoding> encodings;
  WindowJob::Clock::time_point start = WindowJob::Clock::now();
};

std::vector<std::size_t> RankByScore(const std::vector<ScoreResult>& results, std::size_t top_n) {
  std::vector<double> scores;
  for (const ScoreResult& r : results) scores.push_back(r.score);
  return RankDescending(scores, top_n);
}

const char* EncoderService::task() const {
  if (embeds()) return "embed";
  if (classifies_tokens()) return "token_classify";
  return scores_pairs() ? "score" : "classify";
}

StatusOr<std::shared_ptr<EncoderService::Prepared>> EncoderService::Prepare(
    const std::vector<EncoderInput>& inputs, const Tokenize& how, double timeout_seconds, const std::string& param,
    const std::function<std::string(std::size_t)>& name_input) const {
  auto p = std::make_shared<Prepared>();
  if (inputs.empty()) return InvalidArgument("no input").WithParam(param);
  if (inputs.size() > impl_->options.max_inputs)
    return InvalidArgument("at most " + std::to_string(impl_->options.max_inputs) + " inputs per request, got " +
                           std::to_string(inputs.size()))
        .WithParam(param);
  // The prompt (embeddings of texts only), and how many of its tokens the
  // pooling skips: sentence-transformers counts the prompt's tokens with
  // the special tokens, less one (the closing one).
  const embedding::EmbeddingConfig& pc = impl_->pooling;
  std::string prompt;
  std::int64_t prompt_tokens = 0;
  const std::string prompt_name = how.use_prompt ? how.prompt_name.value_or(pc.default_prompt_name) : "";
  if (!prompt_name.empty()) {
    auto it = pc.prompts.find(prompt_name);
    if (it == pc.prompts.end()) {
      std::string names;
      for (const auto& [n, text] : pc.prompts) names += (names.empty() ? "" : ", ") + n;
      return InvalidArgument("prompt_name '" + prompt_name.substr(0, 100) + "' is not one of the model's prompts (" +
                             (names.empty() ? "it has none" : names) + ")")
          .WithParam("prompt_name");
    }
    prompt = it->second;
    if (!pc.include_prompt) {
      RS_ASSIGN_OR_RETURN(auto enc, impl_->tokenizer->Encode(prompt, true));
      prompt_tokens = std::max<std::int64_t>(0, static_cast<std::int64_t>(enc.size()) - 1);
    }
  }
  const std::int64_t limit = max_input_tokens();
  p->job = std::make_shared<WindowJob>("the encoder request");
  auto check_text = [&](const std::string& text, const std::string& where) -> Status {
    if (text.empty()) return InvalidArgument("an input is an empty string").WithParam(where);
    if (text.size() > impl_->options.max_input_bytes)
      return InvalidArgument("an input of " + std::to_string(text.size()) + " bytes is longer than the " +
                             std::to_string(impl_->options.max_input_bytes) + " allowed")
          .WithParam(where);
    return Status::Ok();
  };
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string where = name_input           ? name_input(i)
                              : inputs.size() == 1 ? param
                                                   : param + "[" + std::to_string(i) + "]";
    std::vector<TokenId> ids;
    std::vector<std::uint32_t> types;
    std::int64_t first = 0;
    if ((inputs[i].ids || inputs[i].pair) && how.keep_encodings) {
      return InvalidArgument("token classification reads single texts, not token ids or pairs").WithParam(where);
    } else if (inputs[i].ids) {
      ids = *inputs[i].ids;
      if (ids.empty()) return InvalidArgument("an input has no tokens").WithParam(where);
      for (TokenId id : ids)
        if (id < 0 || static_cast<std::int64_t>(id) >= config().vocab_size)
          return InvalidArgument("token id " + std::to_string(id) + " is outside the model's vocabulary of " +
                                 std::to_string(config().vocab_size))
              .WithParam(where);
      if (static_cast<std::int64_t>(ids.size()) > limit && how.truncate)
        ids.erase(how.truncate_left ? ids.begin() : ids.begin() + limit,
                  how.truncate_left ? ids.end() - limit : ids.end());
    } else {
      RS_RETURN_IF_ERROR(check_text(inputs[i].text, where));
      if (inputs[i].pair) RS_RETURN_IF_ERROR(check_text(*inputs[i].pair, where));
      const std::string full = prompt + inputs[i].text;
      auto encode = [&](const std::optional<tok::Truncation>& t) {
        if (inputs[i].pair) return impl_->tokenizer->EncodePair(full, *inputs[i].pair, true, t);
        return t ? impl_->tokenizer->Encode(full, true, *t) : impl_->tokenizer->Encode(full, true);
      };
      auto enc = encode(std::nullopt);
      if (!enc.ok()) return enc.status().WithParam(where);
      if (static_cast<std::int64_t>(enc->size()) > limit && how.truncate) {
        tok::Truncation t;
        t.max_length = static_cast<std::size_t>(limit);
        t.direction = how.truncate_left ? tok::TruncationDirection::kLeft : tok::TruncationDirection::kRight;
        enc = encode(t);
        if (!enc.ok()) return enc.status().WithParam(where);
      }
      if (how.keep_encodings) {
        p->texts.push_back(inputs[i].text);
        p->encodings.push_back(*enc);
      }
      ids = std::move(enc->ids);
      if (inputs[i].pair) types = std::move(enc->type_ids);
      if (ids.empty()) return InvalidArgument("an input has no tokens").WithParam(where);
      first = prompt_tokens;
    }
    if (static_cast<std::int64_t>(ids.size()) > limit)
      return InvalidArgument("an input of " + std::to_string(ids.size()) + " tokens is longer than the model's " +
                             std::to_string(limit) + " (truncate it, or ask for truncation)")
          .WithParam(where);
    p->skip.push_back(first);
    p->job->windows.push_back(std::move(ids));
    p->job->type_ids.push_back(std::move(types));
  }
  p->job->Prepare();
  p->job->SetTimeout(p->start, timeout_seconds);
  return p;
}

Status EncoderService::CheckDimensions(const EmbedOptions& options) const {
  if (options.dimensions && (*options.dimensions < 1 || *options.dimensions > dimensions()))
    return InvalidArgument("dimensions " + std::to_string(*options.dimensions) + " must be between 1 and " +
                           std::to_string(dimensions()) + ", the model's embedding size")
        .WithParam("dimensions");
  return Status::Ok();
}

void EncoderService::Observe(const Prepared& p) const {
  if (impl_->options.on_latency)
    impl_->options.on_latency(std::chrono::duration<double>(WindowJob::Clock::now() - p.start).count());
}

StatusOr<std::vector<EmbedResult>> EncoderService::FinishEmbed(Prepared& p, const EmbedOptions& options) const {
  const std::size_t n = p.job->windows.size();
  std::vector<EmbedResult> out(n);
  const std::int64_t hidden = config().hidden_size;
  for (std::size_t i = 0; i < n; ++i) {
    const auto len = static_cast<std::int64_t>(p.job->windows[i].size());
    out[i].tokens = len;
    if (static_cast<std::int64_t>(p.job->output(i).hidden.size()) != len * hidden)
      return Internal("the encoder returned no hidden state for an input");
    out[i].embedding = embedding::Pool(p.job->output(i).hidden, len, hidden, impl_->pooling.pooling, p.skip[i]);
    if (options.dimensions) RS_RETURN_IF_ERROR(embedding::Truncate(out[i].embedding, *options.dimensions));
    if (options.normalize) embedding::Normalize(out[i].embedding);
  }
  return out;
}

StatusOr<std::vector<ClassifyResult>> EncoderService::FinishClassify(Prepared& p,
                                                                     const ClassifyOptions& options) const {
  const std::size_t n = p.job->windows.size();
  std::vector<ClassifyResult> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].tokens = static_cast<std::int64_t>(p.job->windows[i].size());
    out[i].scores = std::move(p.job->output(i).classes);
    if (static_cast<std::int64_t>(out[i].scores.size()) != config().num_labels)
      return Internal("the classifier returned no logits for an input");
    if (options.activation != ClassifyOptions::Activation::kNone)
      ApplyScoreActivation(options.activation == ClassifyOptions::Activation::kScore ? config().score_activation
                                                                                     : config().classify_activation,
                           out[i].scores);
  }
  return out;
}

StatusOr<std::vector<TokenClassifyResult>> EncoderService::FinishTokens(Prepared& p,
                                                                        const TokenClassifyOptions& options) const {
  const std::size_t n = p.job->windows.size();
  std::vector<TokenClassifyResult> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].tokens = static_cast<std::int64_t>(p.job->windows[i].size());
    const qa::TokenLogits logits{p.texts[i], p.encodings[i], p.job->output(i).classes, config().labels};
    RS_ASSIGN_OR_RETURN(out[i].entities,
                        qa::GroupEntities(logits, *impl_->tokenizer, options.aggregation, options.ignore_labels));
  }
  return out;
}

namespace {

Status NotA(const EncoderConfig& c, const char* what) { return FailedPrecondition(c.architecture + " is not " + what); }

// Runs a prepared job to completion on the calling thread, or queues it
// with `done` (the services' two ways of serving a call).
template <class Result, class Finish>
StatusOr<Result> RunSync(EncoderLane& lane, const std::shared_ptr<WindowJob>& job, bool (*abandoned)(), Finish finish) {
  RS_RETURN_IF_ERROR(lane.Push(job));
  RS_RETURN_IF_ERROR(job->Wait(abandoned));
  return finish();
}

template <class Result, class Finish>
StatusOr<std::shared_ptr<EncoderCall>> RunAsync(EncoderLane& lane, const std::shared_ptr<WindowJob>& job,
                                                const EncoderLane::Post* post, Finish finish,
                                                std::function<void(StatusOr<Result>)> done) {
  RS_RETURN_IF_ERROR(lane.PushAsync(
      job, post, [finish, done] { done(finish()); }, [done](const Status& status) { done(status); }));
  return std::static_pointer_cast<EncoderCall>(job);
}

}  // namespace

StatusOr<std::vector<EmbedResult>> EncoderService::Embed(const std::vector<EncoderInput>& inputs,
                                                         const EmbedOptions& options, double timeout_seconds,
                                                         bool (*abandoned)(), const std::string& param) {
  if (!embeds()) return NotA(config(), "an embedding model (a base model without a head)");
  RS_RETURN_IF_ERROR(CheckDimensions(options));
  RS_ASSIGN_OR_RETURN(auto p, Prepare(inputs, EmbedTokenize(options), timeout_seconds, param));
  return RunSync<std::vector<EmbedResult>>(*impl_->lane, p->job, abandoned, [&]() {
    Observe(*p);
    return FinishEmbed(*p, options);
  });
}

StatusOr<std::shared_ptr<EmbedCall>> EncoderService::EmbedAsync(const std::vector<EncoderInput>& inputs,
                                                                const EmbedOptions& options, double timeout_seconds,
                                                                Done done, const std::string& param) {
  if (!embeds()) return NotA(config(), "an embedding model (a base model without a head)");
  RS_RETURN_IF_ERROR(CheckDimensions(options));
  RS_ASSIGN_OR_RETURN(auto p, Prepare(inputs, EmbedTokenize(options), timeout_seconds, param));
  return RunAsync<std::vector<EmbedResult>>(
      *impl_->lane, p->job, &impl_->options.post,
      [this, p, options] {
        Observe(*p);
        return FinishEmbed(*p, options);
      },
      std::move(done));
}

StatusOr<std::vector<ClassifyResult>> EncoderService::Classify(const std::vector<EncoderInput>& inputs,
                                                               const ClassifyOptions& options, double timeout_seconds,
                                                               bool (*abandoned)(), const std::string& param) {
  if (!classifies()) return NotA(config(), "a sequence classifier");
  RS_ASSIGN_OR_RETURN(auto p,
                      Prepare(inputs, Truncating(options.truncate, options.truncate_left), timeout_seconds, param));
  return RunSync<std::vector<ClassifyResult>>(*impl_->lane, p->job, abandoned, [&]() {
    Observe(*p);
    return FinishClassify(*p, options);
  });
}

StatusOr<std::shared_ptr<EncoderCall>> EncoderService::ClassifyAsync(const std::vector<EncoderInput>& inputs,
                                                                     const ClassifyOptions& options,
                                                                     double timeout_seconds, ClassifyDone done,
                                                                     const std::string& param) {
  if (!classifies()) return NotA(config(), "a sequence classifier");
  RS_ASSIGN_OR_RETURN(auto p,
                      Prepare(inputs, Truncating(options.truncate, options.truncate_left), timeout_seconds, param));
  return RunAsync<std::vector<ClassifyResult>>(
      *impl_->lane, p->job, &impl_->options.post,
      [this, p, options] {
        Observe(*p);
        return FinishClassify(*p, options);
      },
      std::move(done));
}

StatusOr<std::vector<TokenClassifyResult>> EncoderService::ClassifyTokens(const std::vector<EncoderInput>& inputs,
                                                                          const TokenClassifyOptions& options,
                                                                          double timeout_seconds, bool (*abandoned)(),
                                                                          const std::string& param) {
  if (!classifies_tokens()) return NotA(config(), "a token classifier");
  Tokenize how = Truncating(options.truncate, options.truncate_left);
  how.keep_encodings = true;
  RS_ASSIGN_OR_RETURN(auto p, Prepare(inputs, how, timeout_seconds, param));
  return RunSync<std::vector<TokenClassifyResult>>(*impl_->lane, p->job, abandoned, [&]() {
    Observe(*p);
    return FinishTokens(*p, options);
  });
}

StatusOr<std::shared_ptr<EncoderCall>> EncoderService::ClassifyTokensAsync(const std::vector<EncoderInput>& inputs,
                                                                           const TokenClassifyOptions& options,
                                                                           double timeout_seconds,
                                                                           ClassifyTokensDone done,
                                                                           const std::string& param) {
  if (!classifies_tokens()) return NotA(config(), "a token classifier");
  Tokenize how = Truncating(options.truncate, options.truncate_left);
  how.keep_encodings = true;
  RS_ASSIGN_OR_RETURN(auto p, Prepare(inputs, how, timeout_seconds, param));
  return RunAsync<std::vector<TokenClassifyResult>>(
      *impl_->lane, p->job, &impl_->options.post,
      [this, p, options] {
        Observe(*p);
        return FinishTokens(*p, options);
      },
      std::move(done));
}

// A cross-encoder's job holds one (query, document) pair per document; an
// embedder's the queries first, then the documents.
StatusOr<std::shared_ptr<EncoderService::Prepared>> EncoderService::PrepareScore(const ScorePairs& pairs,
                                                                                 const ScoreOptions& options,
                                                                                 double timeout_seconds) const {
  if (!scores_pairs())
    return NotA(config(), "a cross-encoder (a classifier of one label) or an embedding model: it cannot score pairs");
  const std::size_t nq = pairs.queries.size(), nd = pairs.documents.size();
  if (nd == 0) return InvalidArgument("no document to score").WithParam(pairs.param);
  if (nq != 1 && nq != nd)
    return InvalidArgument("one query, or one per document: got " + std::to_string(nq) + " queries for " +
                           std::to_string(nd) + " documents")
        .WithParam(pairs.query_param);
  std::vector<EncoderInput> inputs;
  if (!embeds()) {
    for (std::size_t i = 0; i < nd; ++i)
      inputs.push_back(EncoderInput::Pair(pairs.queries[nq == 1 ? 0 : i], pairs.documents[i]));
  } else {
    for (const std::string& q : pairs.queries) inputs.push_back(EncoderInput::Text(q));
    for (const std::string& d : pairs.documents) inputs.push_back(EncoderInput::Text(d));
  }
  for (std::size_t i = 0; i < nq; ++i)
    if (pairs.queries[i].empty())
      return InvalidArgument("a query is an empty string")
          .WithParam(nq == 1 ? pairs.query_param : pairs.query_param + "[" + std::to_string(i) + "]");
  if (inputs.size() > impl_->options.max_inputs)
    return InvalidArgument("at most " + std::to_string(impl_->options.max_inputs) + " texts per request, got " +
                           std::to_string(inputs.size()))
        .WithParam(pairs.param);
  // Errors name the query or document behind an input, not inputs[i].
  const bool cross = !embeds();
  auto name_input = [&pairs, nq, cross](std::size_t i) {
    if (cross) return pairs.param + "[" + std::to_string(i) + "]";  // (query, documents[i])
    if (i < nq) return nq == 1 ? pairs.query_param : pairs.query_param + "[" + std::to_string(i) + "]";
    return pairs.param + "[" + std::to_string(i - nq) + "]";
  };
  return Prepare(inputs, Truncating(options.truncate, options.truncate_left), timeout_seconds, pairs.param, name_input);
}

StatusOr<std::vector<ScoreResult>> EncoderService::FinishScore(Prepared& p, const ScoreOptions& options,
                                                               std::size_t num_queries) const {
  std::vector<ScoreResult> out;
  if (!embeds()) {
    ClassifyOptions co;
    co.activation = options.raw ? ClassifyOptions::Activation::kNone : ClassifyOptions::Activation::kScore;
    RS_ASSIGN_OR_RETURN(auto classes, FinishClassify(p, co));
    for (const ClassifyResult& c : classes) out.push_back({c.scores[0], c.tokens});
    return out;
  }
  RS_ASSIGN_OR_RETURN(auto e, FinishEmbed(p, EmbedOptions{}));  // normalized: the dot is the cosine
  const std::size_t nd = e.size() - num_queries;
  for (std::size_t i = 0; i < nd; ++i) {
    const std::size_t qi = num_queries == 1 ? 0 : i;
    const std::vector<float>& q = e[qi].embedding;
    const std::vector<float>& d = e[num_queries + i].embedding;
    double dot = 0;
    for (std::size_t k = 0; k < q.size(); ++k) dot += static_cast<double>(q[k]) * d[k];
    // Usage counts every text once: a shared query with the first document.
    const std::int64_t query_tokens = num_queries == 1 && i > 0 ? 0 : e[qi].tokens;
    out.push_back({dot, e[num_queries + i].tokens + query_tokens});
  }
  return out;
}

StatusOr<std::vector<ScoreResult>> EncoderService::Score(const ScorePairs& pairs, const ScoreOptions& options,
                                                         double timeout_seconds, bool (*abandoned)()) {
  RS_ASSIGN_OR_RETURN(auto p, PrepareScore(pairs, options, timeout_seconds));
  const std::size_t nq = pairs.queries.size();
  return RunSync<std::vector<ScoreResult>>(*impl_->lane, p->job, abandoned, [&]() {
    Observe(*p);
    return FinishScore(*p, options, nq);
  });
}

StatusOr<std::shared_ptr<EncoderCall>> EncoderService::ScoreAsync(const ScorePairs& pairs, const ScoreOptions& options,
                                                                  double timeout_seconds, ScoreDone done) {
  RS_ASSIGN_OR_RETURN(auto p, PrepareScore(pairs, options, timeout_seconds));
  const std::size_t nq = pairs.queries.size();
  return RunAsync<std::vector<ScoreResult>>(
      *impl_->lane, p->job, &impl_->options.post,
      [this, p, options, nq] {
        Observe(*p);
        return FinishScore(*p, options, nq);
      },
      std::move(done));
}

}  // namespace ropeserve::service
