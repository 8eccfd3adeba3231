#include "server/engine/scheduler.h"

#include <algorithm>

namespace ropeserve {

Status SchedulerConfig::Validate() const {
  if (max_num_seqs < 1) return InvalidArgument("max_num_seqs must be at least 1");
  if (max_num_batched_tokens < 1) return InvalidArgument("max_num_batched_tokens must be at least 1");
  if (max_prefill_tokens_while_decoding < 0) return InvalidArgument("max_prefill_tokens_while_decoding must be >= 0");
  if (max_waiting_requests < 0) return InvalidArgument("max_waiting_requests must be >= 0");
  if (max_waiting_tokens < 0) return InvalidArgument("max_waiting_tokens must be >= 0");
  if (max_model_len < 1) return InvalidArgument("max_model_len must be at least 1");
  return speculative.Validate();
}

Scheduler::Scheduler(SchedulerConfig config, BlockPool& pool) : config_(config), pool_(pool) {}
Scheduler::~Scheduler() = default;

Request* Scheduler::Find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

const std::vector<TokenId>* Scheduler::Tokens(RequestId id) const {
  Request* r = Find(id);
  return r ? &r->tokens : nullptr;
}

std::int64_t Scheduler::num_cached_prompt_tokens(RequestId id) const {
  Request* r = Find(id);
  return r ? r->num_cached_prompt_tokens : 0;
}

void Scheduler::ForEach(const std::function<void(Request&)>& fn) const {
  for (const auto& [id, r] : requests_) fn(*r);
}

StatusOr<Request*> Scheduler::Add(RequestSpec spec) {
  const auto prompt_len = static_cast<std::int64_t>(spec.prompt.size());
  if (prompt_len == 0) return InvalidArgument("the prompt is empty");
  if (spec.max_tokens < 1) return InvalidArgument("max_tokens must be at least 1");
  if (Find(spec.id) != nullptr) return InvalidArgument("duplicate request id " + std::to_string(spec.id));
  if (prompt_len + spec.max_tokens > config_.max_model_len)
    return InvalidArgument("this model's maximum context length is " + std::to_string(config_.max_model_len) +
                           " tokens, but " + std::to_string(prompt_len) + " prompt tokens + " +
                           std::to_string(spec.max_tokens) + " max_tokens were requested");
  const std::int64_t pool_tokens = static_cast<std::int64_t>(pool_.num_blocks()) * pool_.block_size();
  if (prompt_len + spec.max_tokens > pool_tokens)
    return InvalidArgument("the request needs up to " + std::to_string(prompt_len + spec.max_tokens) +
                           " tokens of KV cache but the whole cache holds " + std::to_string(pool_tokens) +
                           "; it can never run (lower max_tokens or give the server more --kv-cache-memory)");
  if (static_cast<int>(waiting_.size()) >= config_.max_waiting_requests ||
      waiting_tokens_ + prompt_len > config_.max_waiting_tokens)
    return Status(ErrorCode::kResourceExhausted, "server overloaded: too many waiting requests, retry later");

  auto r = std::make_unique<Request>();
  r->tokens = spec.prompt;
  r->spec = std::move(spec);
  r->arrival = next_arrival_++;
  r->blocks = BlockAllocation(&pool_, {});
  Request* raw = r.get();
  requests_.emplace(raw->spec.id, std::move(r));
  InsertWaiting(raw);
  return raw;
}

void Scheduler::InsertWaiting(Request* r) {
  auto before = [](const Request* a, const Request* b) {
    return a->spec.priority != b->spec.priority ? a->spec.priority < b->spec.priority : a->arrival < b->arrival;
  };
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), r, before), r);
  waiting_tokens_ += r->num_tokens();
  r->running = false;
}

bool Scheduler::AllocateFor(Request& r, std::int64_t num_new) {
  const std::int64_t bs = pool_.block_size();
  const std::int64_t needed =
      (r.num_computed + num_new + bs - 1) / bs - static_cast<std::int64_t>(r.blocks.ids().size());
  if (needed <= 0) return true;
  auto ids = pool_.Allocate(static_cast<int>(needed));
  if (!ids) return false;
  r.blocks.Append(*ids);
  return true;
}

std::vector<TokenId> Scheduler::Draft(const Request& r, std::int64_t room) const {
  if (!config_.speculative.enabled() || !r.spec.speculative) return {};
  // Tokens the request may still produce: one per step at least, so the
  // drafts that can count are one fewer; and K/V room within the context.
  const auto generated = r.num_tokens() - static_cast<std::int64_t>(r.spec.prompt.size());
  const std::int64_t limit =
      std::min({room, r.spec.max_tokens - generated - 1, config_.max_model_len - r.num_tokens()});
  if (limit <= 0) return {};
  return ProposeNgram(r.tokens, config_.speculative, limit);
}

void Scheduler::ForgetComputed(Request& r) {
  r.blocks.Release();
  r.num_computed = 0;
  r.hashes.clear();
  r.cached_as.clear();
  r.blocks_sent = 0;  // the runner's table is reset at its next step
}

void Scheduler::Preempt(Request& r) {
  ForgetComputed(r);
  running_.erase(std::find(running_.begin(), running_.end(), &r));
  InsertWaiting(&r);
  ++num_preemptions_;
}

void Scheduler::CacheFullBlocks(Request& r) {
  if (!config_.enable_prefix_caching) return;
  const int bs = pool_.block_size();
  const std::size_t full = static_cast<std::size_t>(r.num_computed / bs);
  while (r.hashes.size() < full) {
    const std::size_t i = r.hashes.size();
    std::span<const TokenId> chunk(r.tokens.data() + i * bs, static_cast<std::size_t>(bs));
    std::optional<BlockHash> parent;
    if (i > 0) parent = r.hashes[i - 1];
    const BlockHash h = pool_.Hash(parent, chunk, r.spec.cache_salt);
    std::optional<BlockRef> as;
    if (i == 0 || r.cached_as[i - 1])
      as = pool_.CacheFullBlock(r.blocks.ids()[i], h, chunk, parent, i == 0 ? std::nullopt : r.cached_as[i - 1]);
    r.hashes.push_back(h);
    r.cached_as.push_back(as);
  }
}

void Scheduler::LoadFromTier(Request& r, std::span<const TokenId> known) {
  KvOffloader::Continuation c = offloader_->Find(known, r.blocks.ids(), r.hashes, r.spec.cache_salt);
  if (c.slots.empty()) return;
  std::optional<std::vector<BlockId>> ids = offloader_->Load(c);
  if (!ids) return;  // no room now: the blocks are computed
  // The copied blocks hold what computing them would have: cached the same way.
  r.blocks.Append(*ids);
  r.num_computed = static_cast<std::int64_t>(r.hashes.size() + ids->size()) * pool_.block_size();
  CacheFullBlocks(r);
}

void Scheduler::ExpireDeadlines(Clock::time_point now) {
  std::vector<RequestId> expired;
  for (const auto& [id, r] : requests_)
    if (r->spec.deadline && *r->spec.deadline <= now) expired.push_back(id);
  for (RequestId id : expired) Finish(id, FinishReason::kDeadline);
}

StepPlan Scheduler::Schedule(Clock::time_point now, std::int64_t prefill_budget) {
  ExpireDeadlines(now);  // first, so expired requests take no more work

  StepPlan plan;
  plan.block_size = pool_.block_size();
  std::int64_t budget = config_.max_num_batched_tokens;
  std::int64_t prefill_left = prefill_budget < 0 ? budget : std::min(prefill_budget, budget);
  if (config_.max_prefill_tokens_while_decoding > 0 &&
      std::any_of(running_.begin(), running_.end(),
                  [](const Request* r) { return r->num_tokens() - r->num_computed == 1; }))
    prefill_left = std::min(prefill_left, config_.max_prefill_tokens_while_decoding);
  std::map<Request*, std::size_t> scheduled;  // request -> index in plan
  bool preempted = false;
  // Background requests wait while any other request runs (SchedulerConfig).
  auto background = [&](const Request& r) { return r.spec.priority >= config_.background_priority; };
  bool foreground = std::any_of(running_.begin(), running_.end(), [&](const Request* r) { return !background(*r); });
  // Prompt logprobs need a [rows, vocab] float32 logits block: a step
  // computes at most kMaxPromptLogprobRows of them (a long prompt is
  // scored over several steps), so that one request cannot make the
  // runner allocate gigabytes (2048 rows of a 152k vocabulary: 1.2 GiB).
  std::int64_t prompt_rows_left = kMaxPromptLogprobRows;
  auto cap_prompt_rows = [&](const Request& r, std::int64_t n) {
    if (!r.spec.prompt_logprobs) return n;
    const auto last_target = static_cast<std::int64_t>(r.spec.prompt.size()) - 1;
    if (r.num_computed >= last_target) return n;  // past the prompt: no rows
    n = std::min(n, prompt_rows_left);
    prompt_rows_left -= std::max<std::int64_t>(n, 0);
    return n;
  };

  auto add_to_plan = [&](Request& r, std::int64_t n, bool decode, const std::vector<TokenId>& drafts = {}) {
    ScheduledSequence s;
    s.request_id = r.spec.id;
    s.start_position = r.num_computed;
    s.token_ids.assign(r.tokens.begin() + r.num_computed, r.tokens.begin() + r.num_computed + n);
    s.token_ids.insert(s.token_ids.end(), drafts.begin(), drafts.end());
    s.num_draft = static_cast<std::int64_t>(drafts.size());
    // The block table as a diff against what the runner has.
    const std::vector<BlockId>& ids = r.blocks.ids();
    s.reset_blocks = r.blocks_sent == 0;
    s.new_blocks.assign(ids.begin() + static_cast<std::ptrdiff_t>(r.blocks_sent), ids.end());
    r.blocks_sent = ids.size();
    s.needs_logits = r.num_computed + n == r.num_tokens();
    if (r.spec.prompt_logprobs) {
      // Rows p in [num_computed, num_computed + n) give the token at p + 1;
      // prompt positions 1 .. prompt size - 1 have logprobs, each once.
      const auto prompt_size = static_cast<std::int64_t>(r.spec.prompt.size());
      const std::int64_t from = std::max(r.num_computed + 1, r.prompt_logprobs_done + 1);
      const std::int64_t to = std::min(r.num_computed + n, prompt_size - 1);  // inclusive
      s.prompt_top_logprobs = *r.spec.prompt_logprobs;
      if (from <= to) {
        s.prompt_logprobs_from = from;
        s.prompt_logprob_targets.assign(r.spec.prompt.begin() + from, r.spec.prompt.begin() + to + 1);
      }
    }
    scheduled[&r] = plan.sequences.size();
    plan.sequences.push_back(std::move(s));
    budget -= n + static_cast<std::int64_t>(drafts.size());
    if (!decode) prefill_left -= n;
  };

  // Proposals only while the batch is small enough for them to pay.
  const int spec_limit = config_.speculative.disable_by_batch_size;
  const bool speculate = spec_limit == 0 || static_cast<int>(running_.size()) <= spec_limit;

  // 1. Running requests, in arrival order.
  for (std::size_t i = 0; i < running_.size() && budget > 0;) {
    Request& r = *running_[i];
    if (foreground && background(r)) {
      ++i;
      continue;
    }
    const bool decode = r.num_tokens() - r.num_computed == 1;
    const std::int64_t n =
        cap_prompt_rows(r, std::min(r.num_tokens() - r.num_computed, decode ? budget : std::min(budget, prefill_left)));
    if (n <= 0) {
      ++i;  // its prefill waits for the next step; decodes behind it still run
      continue;
    }
    // Proposals ride on a decode when blocks for them are free: they never
    // preempt (a rejected draft's block is used by the next tokens anyway).
    std::vector<TokenId> drafts;
    if (decode && speculate) drafts = Draft(r, budget - n);
    if (!drafts.empty() && !AllocateFor(r, n + static_cast<std::int64_t>(drafts.size()))) drafts.clear();
    bool self_preempted = false;
    while (!AllocateFor(r, n)) {
      // Victim: largest priority value, then latest arrival.
      Request* victim = *std::max_element(running_.begin(), running_.end(), [](const Request* a, const Request* b) {
        return a->spec.priority != b->spec.priority ? a->spec.priority < b->spec.priority : a->arrival < b->arrival;
      });
      if (auto it = scheduled.find(victim); it != scheduled.end()) {
        // Undo its place in this step.
        const auto undone = static_cast<std::int64_t>(plan.sequences[it->second].token_ids.size());
        budget += undone;
        if (victim->num_tokens() - victim->num_computed != 1) prefill_left += undone;
        plan.sequences.erase(plan.sequences.begin() + static_cast<std::ptrdiff_t>(it->second));
        const std::size_t removed = it->second;
        scheduled.erase(it);
        for (auto& [req, idx] : scheduled)
          if (idx > removed) --idx;
        --i;  // running_ shrinks before position i
      }
      Preempt(*victim);
      preempted = true;
      if (victim == &r) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) continue;  // running_[i] is now the next request
    add_to_plan(r, n, decode, drafts);
    ++i;
  }

  // 2. Waiting requests, unless this step had to preempt.
  while (!preempted && !waiting_.empty() && prefill_left > 0 && budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Request& r = *waiting_.front();
    // The queue is in priority order: only background requests follow.
    if (foreground && background(r)) break;
    foreground = foreground || !background(r);
    if (r.num_computed == 0 && r.blocks.ids().empty() && config_.enable_prefix_caching && !r.spec.prompt_logprobs) {
      // Leave at least one token to compute: its logits start generation.
      std::span<const TokenId> known(r.tokens.data(), r.tokens.size() - 1);
      auto [ids, hashes] = pool_.MatchPrefix(known, r.spec.cache_salt);
      pool_.Touch(ids);
      r.blocks.Append(ids);
      r.hashes = hashes;
      r.cached_as.clear();
      for (BlockId id : ids) r.cached_as.push_back(pool_.RefOf(id));
      if (offloader_ != nullptr) LoadFromTier(r, known);
      r.num_computed = static_cast<std::int64_t>(r.hashes.size()) * pool_.block_size();
    }
    const std::int64_t n = cap_prompt_rows(r, std::min({r.num_tokens() - r.num_computed, budget, prefill_left}));
    if (n <= 0 || !AllocateFor(r, n)) {
      ForgetComputed(r);  // give the prefix hit back; try again next step
      break;
    }
    if (r.spec.prompt.size() == r.tokens.size() && r.num_cached_prompt_tokens == 0)
      r.num_cached_prompt_tokens = r.num_computed;
    waiting_.pop_front();
    waiting_tokens_ -= r.num_tokens();
    r.running = true;
    running_.push_back(&r);
    std::sort(running_.begin(), running_.end(),
              [](const Request* a, const Request* b) { return a->arrival < b->arrival; });
    add_to_plan(r, n, false);
  }
  return plan;
}

void Scheduler::Update(const StepPlan& plan, const std::map<RequestId, std::vector<TokenId>>& sampled) {
  for (const auto& s : plan.sequences) {
    Request* r = Find(s.request_id);
    if (r == nullptr || !r->running) continue;  // finished or preempted meanwhile
    // The chunk's known tokens, and the drafts the sampler accepted (every
    // sampled token but the last confirms the draft at its place): their
    // K/V is now the request's. Rejected drafts' slots lie past
    // num_computed and are written again by the next step.
    std::int64_t accepted = 0;
    if (s.needs_logits) {
      auto it = sampled.find(s.request_id);
      if (it != sampled.end() && !it->second.empty()) {
        accepted = std::min(static_cast<std::int64_t>(it->second.size()) - 1, s.num_draft);
        r->tokens.insert(r->tokens.end(), it->second.begin(), it->second.end());
      }
    }
    r->num_computed += static_cast<std::int64_t>(s.token_ids.size()) - s.num_draft + accepted;
    CacheFullBlocks(*r);
  }
}

void Scheduler::Finish(RequestId id, FinishReason reason) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request* r = it->second.get();
  if (r->running) {
    running_.erase(std::find(running_.begin(), running_.end(), r));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
    waiting_tokens_ -= r->num_tokens();
  }
  r->blocks.Release();  // the blocks return to the pool now
  r->running = false;
  finished_.emplace_back(std::move(it->second), reason);
  requests_.erase(it);
}

void Scheduler::ForEachRunning(const std::function<void(const std::vector<BlockId>&, std::int64_t)>& fn) const {
  for (const Request* r : running_) fn(r->blocks.ids(), r->num_computed);
}

std::vector<std::pair<std::unique_ptr<Request>, FinishReason>> Scheduler::TakeFinished() {
  std::vector<std::pair<std::unique_ptr<Request>, FinishReason>> out;
  out.swap(finished_);
  return out;
}

}  // namespace ropeserve
