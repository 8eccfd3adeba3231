// One request in the engine: what was asked (spec, generation limits), how
// far it got (tokens, computed tokens, KV blocks), where its output goes
// (stream) and its timing. Owned by the scheduler from admission to its end;
// the engine reads and updates it through Scheduler::Find. Torch-free;
// engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "server/common/trace_context.h"
#include "server/engine/block_pool.h"
#include "server/engine/request_stream.h"
#include "server/engine/step_plan.h"

namespace ropeserve {

// What the scheduler needs to place a request.
struct RequestSpec {
  RequestId id = 0;
  std::vector<TokenId> prompt;
  std::int64_t max_tokens = 16;
  int priority = 0;  // lower runs first (vLLM's convention)
  std::optional<Clock::time_point> deadline;
  std::uint64_t cache_salt = 0;  // separates prefix-cache namespaces
  // Prompt logprobs with this many alternatives (nullopt: none). Such a
  // request takes no prefix-cache hit: every prompt position is computed.
  std::optional<std::size_t> prompt_logprobs;
  // Whether its decode may carry speculative proposals when the server
  // speculates (SchedulerConfig::speculative); a request may opt out.
  bool speculative = true;
};

// When generation stops, besides max_tokens.
struct StopConditions {
  std::int64_t min_tokens = 0;  // EOS and stop ids are ignored before this many tokens
  bool ignore_eos = false;
  std::vector<TokenId> stop_token_ids;  // end generation like EOS (the token is kept)
};

struct Request {
  RequestSpec spec;
  StopConditions stop;

  // Scheduling state.
  std::vector<TokenId> tokens;  // prompt, then generated tokens
  std::int64_t num_computed = 0;
  std::int64_t num_cached_prompt_tokens = 0;  // prefix-cache hit at first admission
  BlockAllocation blocks;
  std::vector<BlockHash> hashes;  // of the full blocks cached so far, in order
  // Per entry of `hashes`: the block that caches that content (the
  // request's own or one another request cached first); nullopt when it
  // could not be cached (a hash collision): the blocks after it are not.
  std::vector<std::optional<BlockRef>> cached_as;
  std::size_t blocks_sent = 0;  // block ids the runner already has (StepPlan diffs)
  std::uint64_t arrival = 0;
  bool running = false;
  // Prompt positions whose logprobs were delivered: 1..prompt_logprobs_done
  // (position 0 has none). A recompute after preemption skips them.
  std::int64_t prompt_logprobs_done = 0;
  std::int64_t num_tokens() const { return static_cast<std::int64_t>(tokens.size()); }

  // Output and timing (RequestMetrics).
  std::shared_ptr<RequestStream> stream;
  std::int64_t generated = 0;
  Clock::time_point submitted, last_token;
  std::optional<Clock::time_point> scheduled, first_token;
  std::vector<double> gaps;  // seconds between consecutive tokens (with an observer)
  TraceContext trace;        // echoed in RequestMetrics (spans of the request's trace)
};

}  // namespace ropeserve
