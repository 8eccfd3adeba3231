// The plain-data contract between the scheduler and the model runner: one
// forward over a packed, unpadded batch of prefill chunks and decode tokens.
// The runner turns it into tensors in exactly one place (ModelRunner).
#pragma once

#include <cstdint>
#include <vector>

#include "server/engine/block_pool.h"

namespace ropeserve {

using RequestId = std::uint64_t;

struct ScheduledSequence {
  RequestId request_id = 0;
  std::vector<TokenId> token_ids;      // the tokens computed this step
  std::int64_t start_position = 0;     // position of token_ids[0] (= tokens already cached)
  std::vector<BlockId> block_table;    // covers start_position + token_ids.size() slots
  bool needs_logits = false;           // this chunk ends the known tokens: sample next
  std::int64_t context_length() const { return start_position + static_cast<std::int64_t>(token_ids.size()); }
};

struct StepPlan {
  std::vector<ScheduledSequence> sequences;  // packed in this order
  int block_size = 16;
  std::int64_t num_tokens() const {
    std::int64_t n = 0;
    for (const auto& s : sequences) n += static_cast<std::int64_t>(s.token_ids.size());
    return n;
  }
  bool empty() const { return sequences.empty(); }
};

}  // namespace ropeserve
