// Oracles for the decoder's serving path, in tests only: greedy decoding by
// dense recompute through ForwardReference (no cache, no batching, unfused
// ops), and the paged forward of one sequence fed in chunks.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "server/models/decoder.h"

namespace ropeserve::testing {

// `n` greedy tokens after `prompt`, recomputing the whole sequence densely
// at every step (ties go to the lowest id, as the sampler's greedy).
inline std::vector<TokenId> ReferenceGreedy(const DecoderModel& m, const std::vector<TokenId>& prompt, int n) {
  std::vector<std::int64_t> seq(prompt.begin(), prompt.end());
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) {
    at::Tensor logits = m.ForwardReference(at::tensor(seq, at::kLong));
    at::Tensor last = logits[logits.size(0) - 1].contiguous();
    const float* p = last.data_ptr<float>();
    const auto next = static_cast<TokenId>(std::max_element(p, p + last.numel()) - p);
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

// The logits of every position of `ids`, fed through ForwardPaged in uneven
// chunks (a prefill, single tokens, multi-token chunks that attend to the
// cached prefix): the serving path's numbers for one sequence.
inline at::Tensor PagedLogits(const DecoderModel& m, const std::vector<std::int64_t>& ids,
                              bool reference_attention = false) {
  const std::vector<std::int64_t> chunks{7, 1, 5, 1, 1, 12};
  constexpr std::int64_t kBlock = 4;
  const auto n = static_cast<std::int64_t>(ids.size());
  PagedKvCache cache = m.AllocatePagedKvCache((n + kBlock - 1) / kBlock + 1, kBlock);
  std::vector<std::int32_t> table;
  for (std::int64_t b = 0; b < (n + kBlock - 1) / kBlock; ++b) table.push_back(static_cast<std::int32_t>(b));
  std::vector<at::Tensor> parts;
  std::int64_t pos = 0;
  for (std::size_t c = 0; pos < n; ++c) {
    const std::int64_t len = std::min<std::int64_t>(c < chunks.size() ? chunks[c] : 3, n - pos);
    PagedBatch b;
    std::vector<std::int64_t> tok(ids.begin() + pos, ids.begin() + pos + len), positions, slots, rows;
    for (std::int64_t i = 0; i < len; ++i) {
      positions.push_back(pos + i);
      slots.push_back(pos + i);  // blocks are 0, 1, 2, ... in order
      rows.push_back(i);
    }
    const auto opts = at::TensorOptions().dtype(at::kLong);
    b.token_ids = at::tensor(tok, opts);
    b.positions = at::tensor(positions, opts);
    b.slot_mapping = at::tensor(slots, opts);
    b.block_tables = {table};
    b.query_lens = {len};
    b.context_lens = {pos + len};
    b.logits_indices = at::tensor(rows, opts);
    b.block_table_tensor = at::tensor(table, at::kInt).unsqueeze(0);
    b.query_start = at::tensor(std::vector<std::int64_t>{0, len}, opts);
    b.context_len_tensor = at::tensor(std::vector<std::int64_t>{pos + len}, opts);
    b.reference_attention = reference_attention;
    parts.push_back(m.ForwardPaged(b, cache));
    pos += len;
  }
  return at::cat(parts, 0);
}

}  // namespace ropeserve::testing
