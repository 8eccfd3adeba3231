// Continuous-batching scheduler: decides, step by step, which requests
// advance by how many tokens, within a token budget and the KV block pool.
// Every request moves num_computed_tokens toward num_tokens; chunked
// prefill, prefix-cache hits and preemption by recompute all fall out of
// that (as in vLLM's v1 scheduler).
//
// Policy: running requests first (in arrival order, decode or the next
// prefill chunk), then waiting ones in (priority, arrival) order. When the
// pool runs out, the running request with the largest priority value, then
// the latest arrival, is preempted: its blocks are freed and it re-enters the
// waiting queue to be recomputed later (its tokens so far are kept, so its
// output does not change). No waiting request is admitted in a step that
// preempted.
// Threading: not thread-safe; owned by the engine thread.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "server/common/status.h"
#include "server/engine/block_pool.h"
#include "server/engine/kv_offload.h"
#include "server/engine/request.h"
#include "server/engine/speculative.h"
#include "server/engine/step_plan.h"

namespace ropeserve {

// Prompt-logprob rows (logits of prompt positions) one step may compute.
constexpr std::int64_t kMaxPromptLogprobRows = 256;

struct SchedulerConfig {
  int max_num_seqs = 64;
  std::int64_t max_num_batched_tokens = 2048;
  // Most prompt tokens in a step that also decodes running requests (0:
  // no cap beyond max_num_batched_tokens). Every decode of a step waits for
  // the step's prefill, so this bounds their inter-token latency; a step
  // with no decodes still prefills up to max_num_batched_tokens.
  std::int64_t max_prefill_tokens_while_decoding = 0;
  int max_waiting_requests = 1024;
  std::int64_t max_waiting_tokens = 1 << 22;
  std::int64_t max_model_len = 2048;
  bool enable_prefix_caching = true;
  // Requests whose priority is at least this one (serve sets the Batch
  // API's lines' here) are background work: they run only in steps where
  // no other request is running, filling the gaps between interactive
  // requests without slowing their decode. A background request keeps its
  // KV blocks while it waits (preemption takes them first when memory runs
  // short). The default: no background class.
  int background_priority = std::numeric_limits<int>::max();
  // Prompt-lookup speculative decoding (speculative.h): a running request's
  // decode carries up to speculative.num_tokens proposals when its tokens
  // give some, its request allows it (RequestSpec::speculative), the step's
  // budget has room, free KV blocks hold them (proposals never preempt) and
  // at most speculative.disable_by_batch_size requests run.
  SpeculativeConfig speculative;
  Status Validate() const;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, BlockPool& pool);
  ~Scheduler();
  // The host tier a waiting request's prefix may continue in (its blocks
  // copied back rather than computed); null: none. Set before use.
  void SetOffloader(KvOffloader* offloader) { offloader_ = offloader; }

  // Admission. InvalidArgument for a request that can never run (empty,
  // longer than the model's context, larger than the whole KV pool);
  // ResourceExhausted when the waiting queue is full. The request lives in
  // the scheduler until Finish; the caller fills in its other fields.
  StatusOr<Request*> Add(RequestSpec spec);

  // Plans the next step; first finishes requests whose deadline passed.
  // Prefill chunks (everything but one-token decodes of running requests)
  // together take at most `prefill_budget` tokens (default: the whole
  // budget); the engine keeps the rest for encoder windows.
  StepPlan Schedule(Clock::time_point now = Clock::now(), std::int64_t prefill_budget = -1);

  // Applies a step's results: appends the `sampled` tokens of each sequence
  // that needed logits (keyed by request id: one, or with proposals the
  // accepted drafts and the token after them), advances computed tokens by
  // the chunk less its rejected drafts, and caches newly full blocks.
  void Update(const StepPlan& plan, const std::map<RequestId, std::vector<TokenId>>& sampled);

  // Ends a request (stop condition met, cancelled) and frees its blocks.
  // Unknown ids are ignored (it may have finished already).
  void Finish(RequestId id, FinishReason reason);

  // A live request; nullptr when unknown (finished).
  Request* Find(RequestId id) const;
  // Calls fn for every live request (running and waiting).
  void ForEach(const std::function<void(Request&)>& fn) const;

  // Requests the scheduler ended by itself (deadlines) and those passed to
  // Finish, since the last call, handed over with their last state (their
  // blocks are already free).
  std::vector<std::pair<std::unique_ptr<Request>, FinishReason>> TakeFinished();

  // Tokens of a live request (prompt + generated so far); empty if unknown.
  const std::vector<TokenId>* Tokens(RequestId id) const;

  // Calls fn(block_ids, num_computed_tokens) for every running request.
  void ForEachRunning(const std::function<void(const std::vector<BlockId>&, std::int64_t)>& fn) const;

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  std::uint64_t num_preemptions() const { return num_preemptions_; }
  std::int64_t num_cached_prompt_tokens(RequestId id) const;

 private:
  bool AllocateFor(Request& r, std::int64_t num_new);
  // Proposals for running request r's next decode, at most `room` (the
  // step's budget left after its token), within its limits; empty when
  // speculation is off for it.
  std::vector<TokenId> Draft(const Request& r, std::int64_t room) const;
  void Preempt(Request& r);
  // Ends every request whose deadline is at or before `now` (kDeadline).
  void ExpireDeadlines(Clock::time_point now);
  // Drops r's blocks and computed tokens (its token list is kept).
  void ForgetComputed(Request& r);
  void InsertWaiting(Request* r);
  void CacheFullBlocks(Request& r);
  // Extends a waiting request's prefix hit with the blocks the host tier
  // holds after it (copied into fresh blocks the request then owns).
  void LoadFromTier(Request& r, std::span<const TokenId> known);

  SchedulerConfig config_;
  BlockPool& pool_;
  KvOffloader* offloader_ = nullptr;
  std::map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<Request*> running_;  // arrival order
  std::deque<Request*> waiting_;   // (priority, arrival) order
  std::int64_t waiting_tokens_ = 0;
  std::uint64_t next_arrival_ = 0;
  std::uint64_t num_preemptions_ = 0;
  std::vector<std::pair<std::unique_ptr<Request>, FinishReason>> finished_;
};

}  // namespace ropeserve
