#include "server/service/embedding_service.h"

#include <algorithm>
#include <chrono>

#include "server/service/window_job.h"

namespace ropeserve::service {

namespace {}  // namespace

struct EmbeddingService::Impl {
  std::unique_ptr<SpanModel> model;
  std::shared_ptr<const tok::Tokenizer> tokenizer;
  embedding::EmbeddingConfig pooling;
  EmbeddingServiceOptions options;
  std::unique_ptr<EncoderLane> lane;  // last: it stops before the model goes
};

EmbeddingService::~EmbeddingService() = default;

StatusOr<std::unique_ptr<EmbeddingService>> EmbeddingService::Create(std::unique_ptr<SpanModel> model,
                                                                     std::shared_ptr<const tok::Tokenizer> tokenizer,
                                                                     std::string served_name,
                                                                     embedding::EmbeddingConfig pooling,
                                                                     EmbeddingServiceOptions options) {
  if (!model || !tokenizer) return InvalidArgument("the embedding service needs a model and its tokenizer");
  if (model->config().head != EncoderHead::kNone)
    return InvalidArgument(
        model->config().architecture +
        " has a head; embeddings pool a base model (ModernBertModel, RoFormerModel, a decoder trunk)");
  std::unique_ptr<EmbeddingService> s(new EmbeddingService());
  s->impl_ = std::make_unique<Impl>();
  s->name_ = std::move(served_name);
  Impl& impl = *s->impl_;
  impl.options = options;
  impl.model = std::move(model);
  impl.tokenizer = std::move(tokenizer);
  impl.pooling = std::move(pooling);
  RS_ASSIGN_OR_RETURN(impl.lane, EncoderLane::Create(*impl.model, options.engine, options.max_queue_requests,
                                                     options.max_batch_tokens, "embedding"));
  return s;
}

const EncoderConfig& EmbeddingService::config() const { return impl_->model->config(); }
const embedding::EmbeddingConfig& EmbeddingService::pooling() const { return impl_->pooling; }
const tok::Tokenizer& EmbeddingService::tokenizer() const { return *impl_->tokenizer; }

std::int64_t EmbeddingService::max_input_tokens() const {
  const std::int64_t limit = config().max_position_embeddings;
  return impl_->pooling.max_seq_length ? std::min(limit, *impl_->pooling.max_seq_length) : limit;
}

// A call's inputs: tokenized and queued by Prepare, pooled by Finish.
struct EmbeddingService::Prepared {
  std::shared_ptr<WindowJob> job;  // one call's inputs
  std::vector<std::int64_t> skip;  // per input: leading tokens the pooling leaves out
  WindowJob::Clock::time_point start = WindowJob::Clock::now();
  EmbedOptions options;
};

StatusOr<std::shared_ptr<EmbeddingService::Prepared>> EmbeddingService::Prepare(const std::vector<EmbedInput>& inputs,
                                                                                const EmbedOptions& options,
                                                                                double timeout_seconds,
                                                                                const std::string& param) const {
  auto p = std::make_shared<Prepared>();
  p->options = options;
  if (inputs.empty()) return InvalidArgument("no input to embed").WithParam(param);
  if (inputs.size() > impl_->options.max_inputs)
    return InvalidArgument("at most " + std::to_string(impl_->options.max_inputs) + " inputs per request, got " +
                           std::to_string(inputs.size()))
        .WithParam(param);
  if (options.dimensions && (*options.dimensions < 1 || *options.dimensions > dimensions()))
    return InvalidArgument("dimensions " + std::to_string(*options.dimensions) + " must be between 1 and " +
                           std::to_string(dimensions()) + ", the model's embedding size")
        .WithParam("dimensions");
  // The prompt (texts only), and how many of its tokens the pooling skips:
  // sentence-transformers counts the prompt's tokens with the special
  // tokens, less one (the closing one).
  const embedding::EmbeddingConfig& pc = impl_->pooling;
  std::string prompt;
  std::int64_t prompt_tokens = 0;
  const std::string prompt_name = options.prompt_name.value_or(pc.default_prompt_name);
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
  p->job = std::make_shared<WindowJob>("the embedding request");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string where = inputs.size() == 1 ? param : param + "[" + std::to_string(i) + "]";
    std::vector<TokenId> ids;
    std::int64_t first = 0;
    if (inputs[i].ids) {
      ids = *inputs[i].ids;
      if (ids.empty()) return InvalidArgument("an input has no tokens").WithParam(where);
      for (TokenId id : ids)
        if (id < 0 || static_cast<std::int64_t>(id) >= config().vocab_size)
          return InvalidArgument("token id " + std::to_string(id) + " is outside the model's vocabulary of " +
                                 std::to_string(config().vocab_size))
              .WithParam(where);
      if (static_cast<std::int64_t>(ids.size()) > limit && options.truncate)
        ids.erase(options.truncate_left ? ids.begin() : ids.begin() + limit,
                  options.truncate_left ? ids.end() - limit : ids.end());
    } else {
      const std::string& text = inputs[i].text;
      if (text.empty()) return InvalidArgument("an input is an empty string").WithParam(where);
      if (text.size() > impl_->options.max_input_bytes)
        return InvalidArgument("an input of " + std::to_string(text.size()) + " bytes is longer than the " +
                               std::to_string(impl_->options.max_input_bytes) + " allowed")
            .WithParam(where);
      const std::string full = prompt + text;
      auto enc = impl_->tokenizer->Encode(full, true);
      if (!enc.ok()) return enc.status().WithParam(where);
      if (static_cast<std::int64_t>(enc->size()) > limit && options.truncate) {
        tok::Truncation t;
        t.max_length = static_cast<std::size_t>(limit);
        t.direction = options.truncate_left ? tok::TruncationDirection::kLeft : tok::TruncationDirection::kRight;
        enc = impl_->tokenizer->Encode(full, true, t);
        if (!enc.ok()) return enc.status().WithParam(where);
      }
      ids = std::move(enc->ids);
      if (ids.empty()) return InvalidArgument("an input has no tokens").WithParam(where);
      first = prompt_tokens;
    }
    if (static_cast<std::int64_t>(ids.size()) > limit)
      return InvalidArgument("an input of " + std::to_string(ids.size()) + " tokens is longer than the model's " +
                             std::to_string(limit) + " (truncate it, or ask for truncation)")
          .WithParam(where);
    p->skip.push_back(first);
    p->job->windows.push_back(std::move(ids));
  }
  p->job->Prepare();
  p->job->SetTimeout(p->start, timeout_seconds);
  return p;
}

StatusOr<std::vector<EmbedResult>> EmbeddingService::Finish(Prepared& p) const {
  const std::size_t n = p.job->windows.size();
  std::vector<EmbedResult> out(n);
  const std::int64_t hidden = config().hidden_size;
  for (std::size_t i = 0; i < n; ++i) {
    const auto len = static_cast<std::int64_t>(p.job->windows[i].size());
    out[i].tokens = len;
    if (static_cast<std::int64_t>(p.job->output(i).hidden.size()) != len * hidden)
      return Internal("the encoder returned no hidden state for an input");
    out[i].embedding = embedding::Pool(p.job->output(i).hidden, len, hidden, impl_->pooling.pooling, p.skip[i]);
    if (p.options.dimensions) RS_RETURN_IF_ERROR(embedding::Truncate(out[i].embedding, *p.options.dimensions));
    if (p.options.normalize) embedding::Normalize(out[i].embedding);
  }
  if (impl_->options.on_latency)
    impl_->options.on_latency(std::chrono::duration<double>(WindowJob::Clock::now() - p.start).count());
  return out;
}

StatusOr<std::vector<EmbedResult>> EmbeddingService::Embed(const std::vector<EmbedInput>& inputs,
                                                           const EmbedOptions& options, double timeout_seconds,
                                                           bool (*abandoned)(), const std::string& param) {
  RS_ASSIGN_OR_RETURN(auto p, Prepare(inputs, options, timeout_seconds, param));
  RS_RETURN_IF_ERROR(impl_->lane->Push(p->job));
  RS_RETURN_IF_ERROR(p->job->Wait(abandoned));
  return Finish(*p);
}

StatusOr<std::shared_ptr<EmbedCall>> EmbeddingService::EmbedAsync(const std::vector<EmbedInput>& inputs,
                                                                  const EmbedOptions& options, double timeout_seconds,
                                                                  Done done, const std::string& param) {
  RS_ASSIGN_OR_RETURN(auto p, Prepare(inputs, options, timeout_seconds, param));
  RS_RETURN_IF_ERROR(impl_->lane->PushAsync(
      p->job, &impl_->options.post, [this, p, done] { done(Finish(*p)); },
      [done](const Status& status) { done(status); }));
  return std::static_pointer_cast<EmbedCall>(p->job);
}

}  // namespace ropeserve::service
