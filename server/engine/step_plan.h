// The plain-data contract between the engine and the model runner: one
// forward over a packed, unpadded batch of prefill chunks and decode tokens,
// plus what changed since the previous step (requests the runner meets for
// the first time, requests that ended, blocks appended to block tables).
// The runner keeps per-request state (block table rows, sampler state)
// across steps and updates it from these diffs (BlockTables below is the
// host-side mirror it and the tests use). Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "server/engine/block_pool.h"
#include "server/engine/types.h"
#include "server/sampler/sampling.h"

namespace ropeserve {

// A request's sampling, sent to the runner once (StepPlan::added, before
// the request's first scheduled step) and kept by it until the request
// ends (StepPlan::removed).
struct SamplingSpec {
  RequestId id = 0;
  SamplingParams params;
  std::uint64_t seed = 0;                      // resolved: the request's seed, or a random one
  std::size_t top_logprobs = 0;                // alternatives reported per token
  std::vector<TokenId> prompt;                 // only when the repetition penalty is on (it looks at the prompt)
  std::shared_ptr<LogitsProcessor> processor;  // per-request logits hook (grammar masks); may be null
};

struct ScheduledSequence {
  RequestId request_id = 0;
  std::vector<TokenId> token_ids;   // the tokens computed this step
  std::int64_t start_position = 0;  // position of token_ids[0] (= tokens already cached)
  // The request's block table as a diff: when `reset_blocks` (its first
  // step, or its first after a preemption) the table is `new_blocks`,
  // else `new_blocks` are appended to what the runner has. Afterwards the
  // table covers start_position + token_ids.size() slots.
  bool reset_blocks = false;
  std::vector<BlockId> new_blocks;
  bool needs_logits = false;  // this chunk ends the known tokens: sample next
  // Speculative decoding: the last `num_draft` of token_ids are proposals
  // (not yet the request's tokens), verified by this step. Such a sequence
  // needs_logits and gets 1 + num_draft logits rows, one per position from
  // its last known token on: row i is sampled only when the draft before it
  // was accepted (server/engine/speculative.h).
  std::int64_t num_draft = 0;
  // Prompt logprobs (requests that asked for them): the prompt tokens at
  // positions prompt_logprobs_from, +1, ... whose logprobs this chunk's
  // rows give (the row of position p predicts the token at p + 1), and
  // how many alternatives to report for each.
  std::int64_t prompt_logprobs_from = 0;
  std::vector<TokenId> prompt_logprob_targets;
  std::size_t prompt_top_logprobs = 0;
  std::int64_t context_length() const { return start_position + static_cast<std::int64_t>(token_ids.size()); }
  // Logits rows this sequence takes in the step's output.
  std::int64_t logits_rows() const { return needs_logits ? 1 + num_draft : 0; }
  // The proposals, in order (empty without speculation).
  std::span<const TokenId> drafts() const {
    return std::span<const TokenId>(token_ids).last(static_cast<std::size_t>(num_draft));
  }
};

struct StepPlan {
  std::vector<SamplingSpec> added;           // new to the runner (apply before the step)
  std::vector<RequestId> removed;            // ended since the previous step (drop their state)
  std::vector<ScheduledSequence> sequences;  // packed in this order
  int block_size = 16;
  std::int64_t num_tokens() const {
    std::int64_t n = 0;
    for (const auto& s : sequences) n += static_cast<std::int64_t>(s.token_ids.size());
    return n;
  }
  bool empty() const { return sequences.empty(); }
};

// The block tables a plan's diffs describe, per request. Not thread-safe.
class BlockTables {
 public:
  // Applies `plan`: removed requests are dropped, each sequence's table reset
  // or extended.
  void Apply(const StepPlan& plan);
  // Empty for an unknown request.
  const std::vector<BlockId>& Of(RequestId id) const;
  std::size_t size() const { return tables_.size(); }

 private:
  std::unordered_map<RequestId, std::vector<BlockId>> tables_;
};

}  // namespace ropeserve
