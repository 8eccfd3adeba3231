// Speculative decoding by prompt lookup (n-gram proposals), as vLLM's
// `ngram` method and llama.cpp's lookup decoding: a request whose last
// tokens also occur earlier in its prompt or output proposes the tokens that
// followed that earlier occurrence. Summaries and extractive answers copy
// runs of their source, so the proposals are often right; costing almost
// nothing to make, they are verified in one forward with the decode step.
//
// Where each part lives:
//  - proposals: ProposeNgram below, called by the scheduler when it plans a
//    decode (ScheduledSequence::num_draft drafts after the last token);
//  - verification: the sampler draws the token of each of the 1 + k logits
//    rows in order, exactly as it would without speculation (same
//    processors, penalties, random draws), and stops at the first draw that
//    differs from the draft before it (SampleStep in server/sampler/step_sampling.h). A
//    draft is a single proposal (a point mass q), so the standard rejection
//    rule (accept d with probability min(1, p(d) / q(d)) = p(d), else draw
//    from max(p - q, 0) renormalized, i.e. p without d) gives the same
//    distribution as drawing t ~ p and accepting when t == d: the latter is
//    what runs, and with the request's own generator it gives the very
//    tokens of a non-speculative run whenever the logits rows are the same;
//  - rollback: the scheduler advances num_computed by the accepted drafts
//    only; the K/V rows written for rejected drafts lie past it and are
//    overwritten by the next step (they are never in a full, cached block).
// Torch-free.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "server/common/status.h"
#include "server/common/token_id.h"

namespace ropeserve {

// Most proposals one step may verify per sequence.
constexpr int kMaxSpeculativeTokens = 16;

struct SpeculativeConfig {
  int num_tokens = 0;  // proposals per step (0: speculation off)
  int min_ngram = 2;   // shortest suffix looked up (vLLM's prompt_lookup_min)
  int max_ngram = 4;   // longest (prompt_lookup_max)
  // No proposals in a step while more than this many requests run (0:
  // always propose; vLLM's speculative_disable_by_batch_size). Verifying K
  // proposals costs about K more rows of compute: nearly free while a step
  // is bound by reading the weights (one or two sequences on a CPU), a net
  // loss once the batch makes it compute-bound (docs/benchmarks.md).
  int disable_by_batch_size = 2;
  bool enabled() const { return num_tokens > 0; }
  Status Validate() const;
};

// Up to `max_tokens` proposals for what follows `tokens`: the longest
// suffix of `tokens` of min_ngram..max_ngram tokens that also occurs
// earlier in `tokens` (its earliest occurrence among equally long ones,
// as vLLM), and the tokens after that occurrence (fewer near the end).
// Empty when no such n-gram exists. O(tokens x max_ngram).
std::vector<TokenId> ProposeNgram(std::span<const TokenId> tokens, const SpeculativeConfig& config,
                                  std::int64_t max_tokens);

}  // namespace ropeserve
