#include "server/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "server/common/exception_message.h"

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
    return Internal(std::string(what) + ": " + ExceptionMessage(e));
  } catch (...) {
    return Internal(std::string(what) + ": unknown exception");
  }
}

}  // namespace

// ---- Engine ----

struct Engine::InboxItem {
  enum class Kind { kSubmit, kCancel, kCall } kind;
  RequestId id = 0;
  std::function<void()> call;  // kCall: runs on the engine thread
  EngineRequest request;
  std::shared_ptr<RequestStream> stream;
  Clock::time_point submitted;
};

Engine::Engine(EngineConfig config, ModelExecutor& executor)
    : config_(std::move(config)),
      executor_(executor),
      pool_(config_.num_blocks, config_.block_size, config_.block_hasher),
      scheduler_(config_.scheduler, pool_) {
  if (config_.kv_offload_blocks > 0 && config_.kv_offload_mover != nullptr) {
    offloader_ = std::make_unique<KvOffloader>(pool_, config_.kv_offload_blocks, *config_.kv_offload_mover,
                                               config_.kv_events != nullptr ? &kv_recorder_ : nullptr);
    scheduler_.SetOffloader(offloader_.get());
  }
  if (config_.kv_events != nullptr) {
    pool_.SetListener(&kv_recorder_);
    kv_recorder_.AllCleared();  // a new engine's cache is empty, whatever a subscriber saw before
    PublishKvEvents();
  }
}

Engine::~Engine() { Stop(); }

void Engine::Start() {
  threaded_ = true;
  if (!config_.wake_readers_inline) waker_ = std::make_unique<StreamWaker>();
  thread_ = std::thread([this] { Loop(); });
}

void Engine::Stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  inbox_cv_.notify_all();
  thread_.join();
  waker_.reset();  // wakes what the engine thread handed over last
}

template <typename Write>
void Engine::Deliver(const std::shared_ptr<RequestStream>& stream, Write&& write) {
  write(*stream, waker_ == nullptr);
  if (waker_ != nullptr) waker_->Add(stream);
}

void Engine::WakeReaders() {
  if (waker_ != nullptr) waker_->Flush();
}

StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(EngineRequest request) {
  // Assertions, not validation: requests are validated once, by the
  // request validator (server/service/request_params.h), and arrive here
  // through GenerationService::Start, which takes nothing else. What fails
  // below is a caller's bug; run, a bad sampling value would give NaN
  // probabilities and an id outside the vocabulary would index past the
  // embedding table (on a GPU, a device fault that takes every request with
  // it), so it fails this request alone, as an internal error.
  if (Status s = request.sampling.Validate(); !s.ok())
    return Internal("internal error: unvalidated sampling parameters reached the engine: " + s.message());
  if (request.stop.min_tokens < 0 || request.stop.min_tokens > request.max_tokens)
    return Internal("internal error: an unvalidated min_tokens (" + std::to_string(request.stop.min_tokens) +
                    ", max_tokens " + std::to_string(request.max_tokens) + ") reached the engine");
  for (TokenId id : request.prompt)
    if (id < 0 || id >= executor_.vocab_size())
      return Internal("internal error: an unvalidated prompt token id (" + std::to_string(id) +
                      ") reached the engine (vocabulary [0, " + std::to_string(executor_.vocab_size()) + "))");
  auto item = std::make_unique<InboxItem>();
  item->kind = InboxItem::Kind::kSubmit;
  item->id = next_id_++;
  item->request = std::move(request);
  item->stream = std::make_shared<RequestStream>(item->id);
  item->submitted = Clock::now();
  auto stream = item->stream;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (stop_) return Status(ErrorCode::kFailedPrecondition, "the engine is shutting down");
    inbox_.push_back(std::move(item));
  }
  inbox_cv_.notify_all();
  if (!threaded_) DrainInbox();
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

StatusOr<std::vector<std::uint64_t>> Engine::CachedBlockHashes() {
  RS_ASSIGN_OR_RETURN(KvCacheContents contents, CacheContents());
  return std::move(contents.cached);
}

StatusOr<KvCacheContents> Engine::CacheContents() {
  auto result = std::make_shared<std::promise<KvCacheContents>>();
  auto hashes = result->get_future();
  auto item = std::make_unique<InboxItem>();
  item->kind = InboxItem::Kind::kCall;
  item->call = [this, result] {
    KvCacheContents c;
    c.cached = pool_.CachedHashes();
    if (offloader_ != nullptr) c.offloaded = offloader_->tier().Hashes();
    result->set_value(std::move(c));
  };
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (stop_) return Unavailable("the engine stopped");
    inbox_.push_back(std::move(item));
  }
  inbox_cv_.notify_all();
  if (!threaded_) DrainInbox();
  return hashes.get();  // the engine thread drains its inbox once more before it ends
}

void Engine::PublishKvEvents() {
  if (config_.kv_events == nullptr || kv_recorder_.empty()) return;
  KvEventBatch batch;
  batch.timestamp = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  batch.events = kv_recorder_.Take();
  config_.kv_events->Publish(std::move(batch));
}

void Engine::DrainInbox() {
  std::deque<std::unique_ptr<InboxItem>> items;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    items.swap(inbox_);
  }
  for (auto& item : items) {
    if (item->kind == InboxItem::Kind::kCancel) {
      FinishRequest(item->id, FinishReason::kCancelled);
      continue;
    }
    if (item->kind == InboxItem::Kind::kCall) {
      item->call();
      continue;
    }
    EngineRequest& req = item->request;
    RequestSpec spec;
    spec.id = item->id;
    spec.prompt = req.prompt;
    spec.max_tokens = req.max_tokens;
    spec.priority = req.priority;
    spec.prompt_logprobs = req.prompt_logprobs;
    spec.speculative = req.speculative;
    if (req.timeout) spec.deadline = item->submitted + *req.timeout;
    auto admitted = scheduler_.Add(std::move(spec));
    if (!admitted.ok()) {
      Deliver(item->stream, [&](RequestStream& s, bool wake) {
        s.Finish(FinishReason::kRejected, static_cast<std::int64_t>(req.prompt.size()), 0, admitted.status(), wake);
      });
      continue;
    }
    Request& r = **admitted;
    r.stop = std::move(req.stop);
    r.stream = item->stream;
    r.submitted = item->submitted;
    r.trace = req.trace;
    // The runner learns how to sample it before its first step.
    SamplingSpec sampling;
    sampling.id = item->id;
    sampling.params = req.sampling;
    sampling.seed = req.sampling.seed.value_or(std::random_device{}());
    sampling.top_logprobs = req.top_logprobs;
    if (req.sampling.repetition_penalty != 1.0) sampling.prompt = std::move(req.prompt);
    sampling.processor = std::move(req.processor);
    pending_added_.push_back(std::move(sampling));
    item->stream->Admit();
  }
  UpdateStats();
}

void Engine::FinishRequest(RequestId id, FinishReason reason, Status error) {
  if (scheduler_.Find(id) == nullptr) return;  // ended already
  scheduler_.Finish(id, reason);
  for (auto& [r, why] : scheduler_.TakeFinished()) ReportEnd(*r, why, r->spec.id == id ? error : Status::Ok());
}

void Engine::ReportEnd(const Request& r, FinishReason reason, const Status& error) {
  const auto prompt_tokens = static_cast<std::int64_t>(r.spec.prompt.size());
  // The runner drops its state at the next step (or never saw the request).
  auto unsent = std::find_if(pending_added_.begin(), pending_added_.end(),
                             [&](const SamplingSpec& s) { return s.id == r.spec.id; });
  if (unsent != pending_added_.end()) {
    pending_added_.erase(unsent);
  } else {
    pending_removed_.push_back(r.spec.id);
  }
  if (observer_ != nullptr) {
    const auto now = Clock::now();
    auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    RequestMetrics m;
    m.id = r.spec.id;
    m.finish_reason = reason;
    m.queue_seconds = secs((r.scheduled ? *r.scheduled : now) - r.submitted);
    if (r.first_token) m.ttft_seconds = secs(*r.first_token - r.submitted);
    m.e2e_seconds = secs(now - r.submitted);
    m.inter_token_seconds = r.gaps;
    m.prompt_tokens = prompt_tokens;
    m.generated_tokens = r.generated;
    m.cached_tokens = r.num_cached_prompt_tokens;
    m.trace = r.trace;
    (void)Guarded("metrics", [&] { observer_->OnRequestFinished(m); });  // metrics never fail a request
  }
  if (r.stream) {
    Deliver(r.stream, [&](RequestStream& s, bool wake) {
      s.Finish(reason, prompt_tokens, r.num_cached_prompt_tokens, error, wake);
    });
  }
}

void Engine::AttachEncoder(EncoderQueue* queue, EncoderRunner* runner) {
  if (queue == nullptr || runner == nullptr) return;
  std::lock_guard<std::mutex> lock(encoder_mu_);
  encoders_.push_back({queue, runner});
  queue->SetWake([this] {
    {
      std::lock_guard<std::mutex> inbox_lock(inbox_mu_);
      encoder_kick_ = true;
    }
    inbox_cv_.notify_all();
  });
}

void Engine::DetachEncoder(EncoderQueue* queue) {
  std::lock_guard<std::mutex> lock(encoder_mu_);
  for (auto it = encoders_.begin(); it != encoders_.end(); ++it) {
    if (it->queue != queue) continue;
    queue->SetWake(nullptr);
    encoders_.erase(it);
    return;
  }
}

bool Engine::Step() {
  std::lock_guard<std::mutex> encoder_lock(encoder_mu_);
  const std::int64_t budget = config_.scheduler.max_num_batched_tokens;
  // Prefill chunks leave part of the budget to waiting encoder windows.
  std::int64_t reserve = 0;
  if (!encoders_.empty()) {
    const auto share = static_cast<std::int64_t>(static_cast<double>(budget) * config_.encoder_token_share);
    std::int64_t pending = 0;
    for (const AttachedEncoder& e : encoders_) pending += e.queue->pending_tokens();
    reserve = std::min(pending, share);
  }
  StepPlan plan = scheduler_.Schedule(Clock::now(), std::max<std::int64_t>(1, budget - reserve));
  for (auto& [r, reason] : scheduler_.TakeFinished()) ReportEnd(*r, reason, Status::Ok());  // deadlines
  if (plan.empty() && scheduler_.num_running() == 0 && scheduler_.num_waiting() > 0) {
    // Admission guarantees a lone request fits, so this is a bug; fail the
    // requests rather than spin forever.
    FailAll(Internal("the scheduler could not place the request"));
  }
  // What scheduling evicted reaches the host tier before the forward
  // writes over it.
  if (offloader_ != nullptr) (void)Guarded("KV offload", [&] { offloader_->Flush(); });
  if (!plan.empty()) RunPlan(plan);
  WakeReaders();      // the step's tokens, before the encoder's windows
  PublishKvEvents();  // what scheduling evicted and the forward cached
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
  const std::size_t n = encoders_.size();
  if (n == 0) return 0;
  // First an even share of the budget for each queue with work (at least
  // one window each), then what is left to them in turn; the queue served
  // first turns with each step.
  std::size_t waiting = 0;
  for (const AttachedEncoder& e : encoders_) waiting += e.queue->has_work() ? 1 : 0;
  if (waiting == 0) return 0;
  const std::int64_t share = std::max<std::int64_t>(1, budget / static_cast<std::int64_t>(waiting));
  std::vector<std::vector<EncoderItem>> items(n);
  std::int64_t tokens = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t q = (encoder_turn_ + k) % n;
      const std::int64_t left = budget - tokens;
      if (pass == 1 && left <= 0) break;
      auto taken = pass == 0 ? encoders_[q].queue->Take(std::min(share, std::max<std::int64_t>(left, 1)))
                             : encoders_[q].queue->Take(left, /*at_least_one=*/false);
      for (auto& it : taken) {
        tokens += it.job->window_tokens(it.window);
        items[q].push_back(std::move(it));
      }
    }
  }
  for (std::size_t q = 0; q < n; ++q) {
    if (items[q].empty()) continue;
    if (Status s = Guarded("the encoder forward failed", [&] { encoders_[q].runner->Run(items[q]); }); !s.ok()) {
      for (const auto& it : items[q]) it.job->Fail(s);  // those jobs only
    }
    stats_.encoder_windows += items[q].size();
  }
  encoder_turn_ = (encoder_turn_ + 1) % n;
  return tokens;
}

void Engine::RunPlan(StepPlan& plan) {
  const auto step_start = Clock::now();
  for (const auto& s : plan.sequences) {
    Request& r = *scheduler_.Find(s.request_id);
    if (!r.scheduled) r.scheduled = step_start;
  }
  plan.added = std::move(pending_added_);
  plan.removed = std::move(pending_removed_);
  pending_added_.clear();
  pending_removed_.clear();
  StatusOr<StepOutput> out = Internal("no forward ran");
  if (Status s = Guarded("the model forward failed", [&] { out = executor_.Execute(plan); }); !s.ok()) out = s;
  if (!out.ok()) {
    // A failed forward fails the requests in it, not the server (and those
    // the runner may not have met yet: their sampling state is unknown).
    for (const auto& s : plan.sequences) FinishRequest(s.request_id, FinishReason::kError, out.status());
    for (const auto& a : plan.added) FinishRequest(a.id, FinishReason::kError, out.status());
    return;
  }

  // Prompt logprobs first: they precede a request's first token.
  for (PromptLogprobs& p : out->prompt) {
    Request* r = scheduler_.Find(p.id);
    if (r == nullptr || p.first_position != r->prompt_logprobs_done + 1) continue;  // a recompute's repeat
    r->prompt_logprobs_done += static_cast<std::int64_t>(p.tokens.size());
    Deliver(r->stream, [&](RequestStream& s, bool wake) { s.PushPrompt(std::move(p.tokens), wake); });
  }

  std::map<RequestId, std::vector<TokenId>> sampled;
  for (const SampledToken& t : out->tokens) sampled[t.id].push_back(t.token);
  CountSpeculation(plan, sampled);
  scheduler_.Update(plan, sampled);

  RequestId previous = 0;  // ids start at 1
  for (SampledToken& t : out->tokens) {
    // A request's accepted drafts follow its first token of the step: the
    // step's latency is one gap, not one per token (as vLLM counts it).
    const bool same_step = t.id == previous;
    previous = t.id;
    Request* found = scheduler_.Find(t.id);
    if (found == nullptr) continue;
    Request& r = *found;
    const auto now = Clock::now();
    if (!r.first_token) {
      r.first_token = now;
    } else if (observer_ != nullptr && !same_step) {
      r.gaps.push_back(std::chrono::duration<double>(now - r.last_token).count());
    }
    r.last_token = now;
    ++r.generated;
    const TokenId tok = t.token;
    Deliver(r.stream, [&](RequestStream& s, bool wake) {
      s.Push(GeneratedToken{tok, t.logprob, std::move(t.top)}, wake);
    });
    ++stats_.generated_tokens;
    if (Status s = r.stream->TakeNotifyError(); !s.ok()) {
      FinishRequest(t.id, FinishReason::kError, s);
      continue;
    }
    const StopConditions& stop = r.stop;
    const bool may_stop = r.generated >= stop.min_tokens;
    const bool is_eos = !stop.ignore_eos && std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(),
                                                      tok) != config_.eos_token_ids.end();
    const bool is_stop_id =
        std::find(stop.stop_token_ids.begin(), stop.stop_token_ids.end(), tok) != stop.stop_token_ids.end();
    if (may_stop && (is_eos || is_stop_id)) {
      FinishRequest(t.id, FinishReason::kStop);
    } else if (r.generated >= r.spec.max_tokens) {
      FinishRequest(t.id, FinishReason::kLength);
    }
  }
}

void Engine::CountSpeculation(const StepPlan& plan, const std::map<RequestId, std::vector<TokenId>>& sampled) {
  for (const auto& s : plan.sequences) {
    if (s.num_draft == 0) continue;
    auto it = sampled.find(s.request_id);
    if (it == sampled.end()) continue;
    const auto accepted = std::min<std::int64_t>(static_cast<std::int64_t>(it->second.size()) - 1, s.num_draft);
    ++stats_.spec_drafts;
    stats_.spec_draft_tokens += static_cast<std::uint64_t>(s.num_draft);
    stats_.spec_accepted_tokens += static_cast<std::uint64_t>(accepted);
    for (std::int64_t i = 0; i < accepted; ++i) ++stats_.spec_accepted_per_position[static_cast<std::size_t>(i)];
  }
}

void Engine::UpdateStats() {
  stats_.running = scheduler_.num_running();
  stats_.waiting = scheduler_.num_waiting();
  stats_.preemptions = scheduler_.num_preemptions();
  stats_.prefix_queries = pool_.cache_queries();
  stats_.prefix_hits = pool_.cache_hits();
  if (offloader_ != nullptr) {
    stats_.offload_saved = offloader_->stats().saved_blocks;
    stats_.offload_loaded = offloader_->stats().loaded_blocks;
    stats_.offload_dropped = offloader_->stats().dropped_blocks;
    stats_.offload_skipped = offloader_->stats().skipped_saves;
    stats_.offload_failed_copies = offloader_->stats().failed_copies;
    stats_.offload_used = offloader_->tier().num_used();
  }
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
  scheduler_.ForEach([&](Request& r) { ids.push_back(r.spec.id); });
  for (RequestId id : ids) {
    (void)Guarded("failing a request", [&] { FinishRequest(id, FinishReason::kError, status); });
  }
}

bool Engine::RunOnce() {
  DrainInbox();
  return Step() || scheduler_.has_work();
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
      WakeReaders();
      continue;
    }
    WakeReaders();  // what the inbox refused or cancelled
    if (worked) continue;
    std::unique_lock<std::mutex> lock(inbox_mu_);
    inbox_cv_.wait_for(lock, std::chrono::milliseconds(scheduler_.has_work() ? 1 : 100),
                       [&] { return stop_ || !inbox_.empty() || encoder_kick_; });
    encoder_kick_ = false;
  }
  {
    std::lock_guard<std::mutex> lock(encoder_mu_);
    for (const AttachedEncoder& e : encoders_) e.queue->Close(Status(ErrorCode::kUnavailable, "the engine stopped"));
  }
  // Finish what is left so no reader waits forever.
  DrainInbox();
  std::vector<RequestId> left;
  scheduler_.ForEach([&](Request& r) { left.push_back(r.spec.id); });
  for (RequestId id : left) FinishRequest(id, FinishReason::kCancelled);
  WakeReaders();
}

}  // namespace ropeserve
