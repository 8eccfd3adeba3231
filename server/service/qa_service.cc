#include "server/service/qa_service.h"

#include <algorithm>
#include <tuple>

#include "server/service/request_params.h"
#include "server/service/window_job.h"

namespace ropeserve::service {

namespace {

using Clock = WindowJob::Clock;

}  // namespace

struct QaService::Impl {
  std::unique_ptr<SpanModel> model;
  std::shared_ptr<const tok::Tokenizer> tokenizer;
  QaServiceOptions options;
  std::unique_ptr<EncoderLane> lane;  // last: it stops before the model goes
};

QaService::~QaService() = default;

StatusOr<std::unique_ptr<QaService>> QaService::Create(std::unique_ptr<SpanModel> model,
                                                       std::shared_ptr<const tok::Tokenizer> tokenizer,
                                                       std::string served_name, QaServiceOptions options) {
  if (!model || !tokenizer) return InvalidArgument("the QA service needs a span model and its tokenizer");
  if (model->config().head != EncoderHead::kSpan)
    return InvalidArgument(model->config().architecture +
                           " has no question-answering head (a base model serves embeddings: serve --encoder)");
  std::unique_ptr<QaService> s(new QaService());
  s->impl_ = std::make_unique<Impl>();
  s->name_ = std::move(served_name);
  Impl& impl = *s->impl_;
  impl.options = options;
  impl.model = std::move(model);
  impl.tokenizer = std::move(tokenizer);
  RS_ASSIGN_OR_RETURN(impl.lane, EncoderLane::Create(*impl.model, options.engine, options.max_queue_requests,
                                                     options.max_batch_tokens, "QA"));
  return s;
}

const EncoderConfig& QaService::config() const { return impl_->model->config(); }

bool QaService::scores_null_answer() const { return impl_->tokenizer->config().cls_token.has_value(); }

StatusOr<QaResult> QaService::Answer(const QaRequest& request, double timeout_seconds) {
  RS_ASSIGN_OR_RETURN(auto results, AnswerBatch({request}, timeout_seconds));
  return std::move(results[0]);
}

// A call's windows: built and queued by Submit, scored by Select.
struct QaService::Prepared {
  std::vector<QaRequest> requests;
  std::vector<std::vector<qa::WindowInput>> windows;  // per request; ids moved into the job
  std::vector<std::vector<std::size_t>> passage_of;   // per request: each window's passage
  std::shared_ptr<WindowJob> job;                     // one call's windows (one or several requests)
  Clock::time_point start = Clock::now();
};

StatusOr<std::shared_ptr<QaService::Prepared>> QaService::Prepare(std::vector<QaRequest> requests,
                                                                  double timeout_seconds) const {
  auto p = std::make_shared<Prepared>();
  const EncoderConfig& c = config();
  std::size_t total = 0;
  // Windows first (in the caller's thread), so bad input fails before queueing.
  for (const QaRequest& r : requests) {
    if (r.windows.max_seq_len > c.max_position_embeddings)
      return InvalidArgument("max_seq_len " + std::to_string(r.windows.max_seq_len) +
                             " exceeds the QA model's max_position_embeddings " +
                             std::to_string(c.max_position_embeddings))
          .WithParam("max_seq_len");
    if (r.options.max_answer_len > r.windows.max_seq_len)
      return InvalidArgument("max_answer_len exceeds max_seq_len").WithParam("max_answer_len");
    qa::WindowOptions wo = r.windows;
    wo.max_context_bytes = impl_->options.max_context_bytes;
    wo.max_windows = impl_->options.max_windows;
    const bool multi = !r.passages.empty();
    if (r.passages.size() > static_cast<std::size_t>(kMaxQaPassages))
      return InvalidArgument("at most " + std::to_string(kMaxQaPassages) + " passages per question")
          .WithParam("contexts");
    std::vector<qa::WindowInput> windows;
    std::vector<std::size_t> passage_of;
    for (std::size_t k = 0; k < (multi ? r.passages.size() : 1); ++k) {
      auto w = qa::BuildWindows(*impl_->tokenizer, r.question, multi ? r.passages[k] : r.context, wo);
      if (!w.ok())
        return w.status().param().empty() ? w.status().WithParam(multi ? "contexts" : "context") : w.status();
      total += w->size();
      if (total > impl_->options.max_windows)
        return InvalidArgument("the request's contexts need more than " + std::to_string(impl_->options.max_windows) +
                               " windows (serve --qa-max-windows)")
            .WithParam("inputs");
      for (auto& x : *w) {
        windows.push_back(std::move(x));
        passage_of.push_back(k);
      }
    }
    p->windows.push_back(std::move(windows));
    p->passage_of.push_back(std::move(passage_of));
  }
  p->job = std::make_shared<WindowJob>("the QA request");
  for (auto& ws : p->windows)
    for (auto& w : ws) {  // only w.window is needed after this
      p->job->windows.push_back(std::move(w.ids));
      p->job->type_ids.push_back(std::move(w.type_ids));
    }
  p->job->Prepare();
  p->job->SetTimeout(p->start, timeout_seconds);
  p->requests = std::move(requests);
  return p;
}

StatusOr<std::vector<QaResult>> QaService::Select(Prepared& p) const {
  std::vector<QaResult> out;
  std::size_t k = 0;
  for (std::size_t r = 0; r < p.requests.size(); ++r) {
    const QaRequest& req = p.requests[r];
    std::vector<qa::Passage> passages(req.passages.empty() ? 1 : req.passages.size());
    for (std::size_t i = 0; i < passages.size(); ++i)
      passages[i].context = req.passages.empty() ? &req.context : &req.passages[i];
    QaResult result;
    for (std::size_t i = 0; i < p.windows[r].size(); ++i) {
      qa::QaWindow q = std::move(p.windows[r][i].window);
      q.start_logits = std::move(p.job->output(k).start);
      q.end_logits = std::move(p.job->output(k).end);
      result.tokens += static_cast<std::int64_t>(q.start_logits.size());
      ++k;
      passages[p.passage_of[r][i]].windows.push_back(std::move(q));
    }
    result.windows = static_cast<std::int64_t>(p.windows[r].size());
    double null_score = 0;
    if (req.passages.empty()) {
      RS_ASSIGN_OR_RETURN(result.answers,
                          qa::SelectAnswers(passages[0].windows, req.context, req.options, &null_score));
    } else {
      RS_ASSIGN_OR_RETURN(result.answers, qa::SelectAnswersAcross(passages, req.options, &null_score));
    }
    if (req.options.handle_impossible_answer) result.null_score = null_score;
    for (qa::Answer& a : result.answers) {
      if (a.passage < 0) continue;  // the null answer of several passages
      const std::string& text = req.passages.empty() ? req.context : req.passages[static_cast<std::size_t>(a.passage)];
      std::tie(a.start, a.end) = qa::ConvertOffsets(text, a.start, a.end, req.offset_unit);
    }
    out.push_back(std::move(result));
  }
  if (impl_->options.on_latency)
    impl_->options.on_latency(std::chrono::duration<double>(Clock::now() - p.start).count());
  return out;
}

StatusOr<std::vector<QaResult>> QaService::AnswerBatch(const std::vector<QaRequest>& requests, double timeout_seconds,
                                                       bool (*abandoned)()) {
  RS_ASSIGN_OR_RETURN(auto p, Prepare(requests, timeout_seconds));
  RS_RETURN_IF_ERROR(impl_->lane->Push(p->job));
  RS_RETURN_IF_ERROR(p->job->Wait(abandoned));
  return Select(*p);
}

StatusOr<std::shared_ptr<QaCall>> QaService::AnswerBatchAsync(std::vector<QaRequest> requests, double timeout_seconds,
                                                              Done done) {
  RS_ASSIGN_OR_RETURN(auto p, Prepare(std::move(requests), timeout_seconds));
  RS_RETURN_IF_ERROR(impl_->lane->PushAsync(
      p->job, &impl_->options.post, [this, p, done] { done(Select(*p)); },
      [done](const Status& status) { done(status); }));
  return std::static_pointer_cast<QaCall>(p->job);
}

}  // namespace ropeserve::service
