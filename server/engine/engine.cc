#include "server/engine/engine.h"

#include <optional>

#include <algorithm>
#include <future>
#include <set>
#include <utility>

namespace ropeserve {

namespace {

// Runs `fn`; an exception it throws (LibTorch reports allocation failures
// and shape errors as c10::Error, a std::exception) becomes an Internal
// status naming `what`, so that one bad step fails its own requests and the
// engine thread goes on.
template <typename Fn>
Status Guarded(const char* what, Fn&& fn) noexcept {
  try {
    fn();
    return Status::Ok();
  } catch (const std::exception& e) {
    return Internal(std::string(what) + ": " + e.what());
  } catch (...) {
    return Internal(std::string(what) + ": unknown exception");
  }
}

}  // namespace

// ---- RequestStream ----

StreamChunk RequestStream::Next(std::optional<Clock::duration> timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return !pending_.tokens.empty() || (pending_.finished && !delivered_finish_); };
  if (timeout) {
    cv_.wait_for(lock, *timeout, ready);
  } else {
    cv_.wait(lock, ready);
  }
  StreamChunk out;
  out.tokens.swap(pending_.tokens);
  if (pending_.finished && !delivered_finish_) {
    out.finished = true;
    out.finish_reason = pending_.finish_reason;
    out.error = pending_.error;
    out.prompt_tokens = pending_.prompt_tokens;
    out.cached_tokens = pending_.cached_tokens;
    delivered_finish_ = true;
  }
  return out;
}

void RequestStream::SetNotify(std::function<void()> fn, bool call_if_ready) {
  bool ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notify_ = fn;
    ready = !pending_.tokens.empty() || (pending_.finished && !delivered_finish_);
  }
  if (ready && fn && call_if_ready) Notify(fn);
}

void RequestStream::Push(GeneratedToken token) {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.tokens.push_back(std::move(token));
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) Notify(notify);
}

void RequestStream::Finish(const std::string& reason, std::int64_t prompt_tokens, std::int64_t cached_tokens,
                           Status error) {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.finished = true;
    pending_.finish_reason = reason;
    pending_.prompt_tokens = prompt_tokens;
    pending_.cached_tokens = cached_tokens;
    pending_.error = std::move(error);
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) Notify(notify);
}

void RequestStream::Notify(const std::function<void()>& fn) {
  // A reader's callback that throws must not take the engine thread down;
  // the reader still finds its output through Next().
  const Status s = Guarded("a stream callback failed", fn);
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    notify_error_ = s;
  }
}

Status RequestStream::TakeNotifyError() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(notify_error_, Status::Ok());
}

// ---- Engine ----

struct Engine::Active {
  EngineRequest request;
  std::shared_ptr<RequestStream> stream;
  SamplerRng rng;
  PenaltyState penalties;  // filled only when the request has penalties
  std::int64_t generated = 0;
  // Timing for RequestMetrics.
  Clock::time_point submitted, last_token;
  std::optional<Clock::time_point> scheduled, first_token;
  std::vector<double> gaps;
  std::int64_t cached_tokens = 0;
};

struct Engine::InboxItem {
  enum class Kind { kSubmit, kCancel } kind;
  RequestId id = 0;
  EngineRequest request;
  std::shared_ptr<RequestStream> stream;
  std::promise<Status> verdict;
  Clock::time_point submitted;
};

Engine::Engine(EngineConfig config, ModelExecutor& executor)
    : config_(std::move(config)),
      executor_(executor),
      pool_(config_.num_blocks, config_.block_size),
      scheduler_(config_.scheduler, pool_) {}

Engine::~Engine() { Stop(); }

void Engine::Start() {
  threaded_ = true;
  thread_ = std::thread([this] { Loop(); });
}

void Engine::Stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  inbox_cv_.notify_all();
  thread_.join();
}

StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(EngineRequest request) {
  RS_RETURN_IF_ERROR(request.sampling.Validate());
  if (request.min_tokens < 0 || request.min_tokens > request.max_tokens)
    return InvalidArgument("min_tokens must be between 0 and max_tokens");
  for (TokenId id : request.prompt)
    if (id < 0 || id >= executor_.vocab_size())
      return InvalidArgument("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(executor_.vocab_size()) + ")");
  auto item = std::make_unique<InboxItem>();
  item->kind = InboxItem::Kind::kSubmit;
  item->id = next_id_++;
  item->request = std::move(request);
  item->stream = std::make_shared<RequestStream>(item->id);
  item->submitted = Clock::now();
  auto verdict = item->verdict.get_future();
  auto stream = item->stream;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (stop_) return Status(ErrorCode::kFailedPrecondition, "the engine is shutting down");
    inbox_.push_back(std::move(item));
  }
  inbox_cv_.notify_all();
  if (!threaded_) DrainInbox();
  Status s = verdict.get();
  if (!s.ok()) return s;
  return stream;
}

void Engine::Cancel(RequestId id) {
  auto item = std::make_unique<InboxItem>();
  item->kind = InboxItem::Kind::kCancel;
  item->id = id;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    inbox_.push_back(std::move(item));
  }
  inbox_cv_.notify_all();
  if (!threaded_) DrainInbox();
}

void Engine::DrainInbox() {
  std::deque<std::unique_ptr<InboxItem>> items;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    items.swap(inbox_);
  }
  for (auto& item : items) {
    if (item->kind == InboxItem::Kind::kCancel) {
      if (active_.count(item->id)) End(item->id, FinishReason::kCancelled, "cancelled");
      continue;
    }
    RequestSpec spec;
    spec.id = item->id;
    spec.prompt = item->request.prompt;
    spec.max_tokens = item->request.max_tokens;
    spec.priority = item->request.priority;
    if (item->request.timeout) spec.deadline = item->submitted + *item->request.timeout;
    Status s = scheduler_.Add(std::move(spec));
    if (s.ok()) {
      auto a = std::make_unique<Active>();
      a->request = std::move(item->request);
      a->stream = item->stream;
      a->rng.seed(a->request.sampling.seed.value_or(std::random_device{}()));
      a->submitted = item->submitted;
      if (a->request.sampling.repetition_penalty != 1.0) {
        a->penalties.prompt_tokens.insert(a->request.prompt.begin(), a->request.prompt.end());
      }
      active_.emplace(item->id, std::move(a));
    }
    item->verdict.set_value(s);
  }
  UpdateStats();
}

void Engine::Complete(RequestId id, const std::string& reason, Status error) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  const Active& a = *it->second;
  const auto prompt_tokens = static_cast<std::int64_t>(a.request.prompt.size());
  if (observer_ != nullptr) {
    const auto now = Clock::now();
    auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    RequestMetrics m;
    m.id = id;
    m.finish_reason = reason;
    m.queue_seconds = secs((a.scheduled ? *a.scheduled : now) - a.submitted);
    if (a.first_token) m.ttft_seconds = secs(*a.first_token - a.submitted);
    m.e2e_seconds = secs(now - a.submitted);
    m.inter_token_seconds = a.gaps;
    m.prompt_tokens = prompt_tokens;
    m.generated_tokens = a.generated;
    m.cached_tokens = a.cached_tokens;
    (void)Guarded("metrics", [&] { observer_->OnRequestFinished(m); });  // metrics never fail a request
  }
  it->second->stream->Finish(reason, prompt_tokens, it->second->cached_tokens, std::move(error));
  active_.erase(it);
}

void Engine::End(RequestId id, FinishReason reason, const std::string& stream_reason, Status error) {
  scheduler_.Finish(id, reason);
  scheduler_.TakeFinished();  // the engine reports this end itself, below
  Complete(id, stream_reason, std::move(error));
}

void Engine::AttachEncoder(EncoderQueue* queue, EncoderRunner* runner) {
  std::lock_guard<std::mutex> lock(encoder_mu_);
  if (encoder_queue_ != nullptr) encoder_queue_->SetWake(nullptr);
  encoder_queue_ = queue;
  encoder_runner_ = runner;
  if (queue == nullptr) return;
  queue->SetWake([this] {
    {
      std::lock_guard<std::mutex> inbox_lock(inbox_mu_);
      encoder_kick_ = true;
    }
    inbox_cv_.notify_all();
  });
}

bool Engine::Step() {
  std::lock_guard<std::mutex> encoder_lock(encoder_mu_);
  const std::int64_t budget = config_.scheduler.max_num_batched_tokens;
  // Prefill chunks leave part of the budget to waiting encoder windows.
  std::int64_t reserve = 0;
  if (encoder_queue_ != nullptr) {
    const auto share = static_cast<std::int64_t>(static_cast<double>(budget) * config_.encoder_token_share);
    reserve = std::min(encoder_queue_->pending_tokens(), share);
  }
  StepPlan plan = scheduler_.Schedule(Clock::now(), std::max<std::int64_t>(1, budget - reserve));
  for (auto [id, reason] : scheduler_.TakeFinished()) Complete(id, FinishReasonName(reason));
  if (plan.empty() && scheduler_.num_running() == 0 && scheduler_.num_waiting() > 0) {
    // Admission guarantees a lone request fits, so this is a bug; fail the
    // requests rather than spin forever.
    std::vector<RequestId> stuck;
    for (auto& [id, _] : active_) stuck.push_back(id);
    for (RequestId id : stuck)
      End(id, FinishReason::kCancelled, "error", Internal("the scheduler could not place the request"));
  }
  if (!plan.empty()) RunPlan(plan);
  const std::int64_t encoder_tokens = RunEncoder(budget - plan.num_tokens());
  if (plan.empty() && encoder_tokens == 0) return false;

  ++stats_.steps;
  stats_.step_tokens += static_cast<std::uint64_t>(plan.num_tokens());
  stats_.encoder_tokens += static_cast<std::uint64_t>(encoder_tokens);
  UpdateStats();
  if (observer_ != nullptr) {
    StepMetrics m;
    m.scheduled_tokens = plan.num_tokens();
    m.encoder_tokens = encoder_tokens;
    m.running = stats_.running;
    m.waiting = stats_.waiting;
    m.kv_usage = stats_.kv_usage;
    m.preemptions_total = static_cast<std::int64_t>(stats_.preemptions.load());
    (void)Guarded("metrics", [&] { observer_->OnStep(m); });
  }
  return true;
}

std::int64_t Engine::RunEncoder(std::int64_t budget) {
  if (encoder_queue_ == nullptr || encoder_runner_ == nullptr) return 0;
  std::vector<EncoderItem> items = encoder_queue_->Take(budget);
  if (items.empty()) return 0;
  std::int64_t tokens = 0;
  for (const auto& it : items) tokens += it.job->window_tokens(it.window);
  if (Status s = Guarded("the encoder forward failed", [&] { encoder_runner_->Run(items); }); !s.ok()) {
    for (const auto& it : items) it.job->Fail(s);  // those jobs only
  }
  stats_.encoder_windows += items.size();
  return tokens;
}

void Engine::RunPlan(const StepPlan& plan) {
  const auto step_start = Clock::now();
  for (const auto& s : plan.sequences) {
    Active& a = *active_.at(s.request_id);
    if (!a.scheduled) a.scheduled = step_start;
  }
  StatusOr<StepLogits> logits = Internal("no forward ran");
  if (Status s = Guarded("the model forward failed", [&] { logits = executor_.Execute(plan); }); !s.ok()) logits = s;
  if (!logits.ok()) {
    // A failed forward fails the requests in it, not the server.
    for (const auto& s : plan.sequences) End(s.request_id, FinishReason::kCancelled, "error", logits.status());
    return;
  }

  std::map<RequestId, TokenId> sampled;
  std::vector<std::pair<RequestId, GeneratedToken>> produced;
  std::int64_t row = 0;
  for (const auto& s : plan.sequences) {
    if (!s.needs_logits) continue;
    Active& a = *active_.at(s.request_id);
    const std::int64_t r = row++;
    auto view = logits->Row(r);
    GeneratedToken t;
    // Logprobs below are those of the raw logits (as vLLM reports them).
    t.id = static_cast<TokenId>(SampleStep(view, a.request.sampling, a.penalties, penalized_, a.rng));
    const double lse = logits->logsumexp != nullptr ? logits->logsumexp[r] : LogSumExp(view);
    t.logprob = LogprobOf(view, t.id, lse);
    if (a.request.top_logprobs > 0)
      for (auto [id, lp] : TopLogprobs(view, a.request.top_logprobs, lse)) t.top_logprobs.emplace_back(id, lp);
    sampled[s.request_id] = t.id;
    produced.emplace_back(s.request_id, std::move(t));
  }
  scheduler_.Update(plan, sampled);

  for (auto& [id, t] : produced) {
    Active& a = *active_.at(id);
    if (a.generated == 0) a.cached_tokens = scheduler_.num_cached_prompt_tokens(id);
    const auto now = Clock::now();
    if (!a.first_token) {
      a.first_token = now;
    } else if (observer_ != nullptr) {
      a.gaps.push_back(std::chrono::duration<double>(now - a.last_token).count());
    }
    a.last_token = now;
    ++a.generated;
    const TokenId tok = t.id;
    a.stream->Push(std::move(t));
    ++stats_.generated_tokens;
    if (Status s = a.stream->TakeNotifyError(); !s.ok()) {
      End(id, FinishReason::kCancelled, "error", s);
      continue;
    }
    const auto& r = a.request;
    const bool may_stop = a.generated >= r.min_tokens;
    const bool is_eos = !r.ignore_eos && std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(), tok) !=
                                             config_.eos_token_ids.end();
    const bool is_stop_id = std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), tok) != r.stop_token_ids.end();
    std::optional<FinishReason> reason;
    if (may_stop && (is_eos || is_stop_id)) reason = FinishReason::kStop;
    else if (a.generated >= r.max_tokens) reason = FinishReason::kLength;
    if (reason) End(id, *reason, FinishReasonName(*reason));
  }
}

void Engine::UpdateStats() {
  stats_.running = scheduler_.num_running();
  stats_.waiting = scheduler_.num_waiting();
  stats_.preemptions = scheduler_.num_preemptions();
  stats_.prefix_queries = pool_.cache_queries();
  stats_.prefix_hits = pool_.cache_hits();
  const double usage = pool_.usage();
  stats_.kv_usage = usage;
  if (usage > stats_.peak_kv_usage) {
    stats_.peak_kv_usage = usage;
    // Slots of referenced blocks that hold no token (shared blocks once).
    std::map<BlockId, std::int64_t> fill;
    const std::int64_t bs = pool_.block_size();
    scheduler_.ForEachRunning([&](const std::vector<BlockId>& ids, std::int64_t computed) {
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const std::int64_t f = std::clamp<std::int64_t>(computed - static_cast<std::int64_t>(i) * bs, 0, bs);
        fill[ids[i]] = std::max(fill[ids[i]], f);
      }
    });
    std::int64_t held = 0;
    for (auto& [_, f] : fill) held += f;
    const std::int64_t slots = static_cast<std::int64_t>(fill.size()) * bs;
    stats_.kv_waste_at_peak = slots > 0 ? 1.0 - static_cast<double>(held) / static_cast<double>(slots) : 0.0;
  }
}

void Engine::FailAll(const Status& status) {
  std::vector<RequestId> ids;
  for (auto& [id, _] : active_) ids.push_back(id);
  for (RequestId id : ids) {
    (void)Guarded("failing a request", [&] { End(id, FinishReason::kCancelled, "error", status); });
  }
}

void Engine::RunUntilIdle() {
  for (;;) {
    DrainInbox();
    if (!Step() && !scheduler_.has_work()) break;
  }
}

void Engine::Loop() {
  while (!stop_) {
    DrainInbox();
    bool worked = false;
    if (Status s = Guarded("engine step", [&] { worked = Step(); }); !s.ok()) {
      // Outside the guarded forward and encoder runs only a bug throws; the
      // step's state is unknown, so every live request fails and the
      // engine serves new ones.
      FailAll(s);
      continue;
    }
    if (worked) continue;
    std::unique_lock<std::mutex> lock(inbox_mu_);
    inbox_cv_.wait_for(lock, std::chrono::milliseconds(scheduler_.has_work() ? 1 : 100),
                       [&] { return stop_ || !inbox_.empty() || encoder_kick_; });
    encoder_kick_ = false;
  }
  {
    std::lock_guard<std::mutex> lock(encoder_mu_);
    if (encoder_queue_ != nullptr) encoder_queue_->Close(Status(ErrorCode::kUnavailable, "the engine stopped"));
  }
  // Finish what is left so no reader waits forever.
  DrainInbox();
  std::vector<RequestId> left;
  for (auto& [id, _] : active_) left.push_back(id);
  for (RequestId id : left) End(id, FinishReason::kCancelled, "cancelled");
}

}  // namespace ropeserve
