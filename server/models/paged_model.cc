#include "server/models/paged_model.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace ropeserve {

PagedBatch ContiguousChunk(const std::vector<std::int64_t>& tokens, std::int64_t start, std::int64_t num_blocks,
                           at::Device device) {
  const auto len = static_cast<std::int64_t>(tokens.size());
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  PagedBatch b;
  b.token_ids = at::tensor(tokens, at::kLong).to(device);
  b.positions = at::arange(start, start + len, opts);
  b.slot_mapping = b.positions;  // blocks 0, 1, 2, ... in order
  b.query_lens = {len};
  b.context_lens = {start + len};
  b.logits_indices = at::arange(len, opts);
  b.block_table_tensor = at::arange(num_blocks, opts.dtype(at::kInt)).unsqueeze(0);
  b.query_start = at::tensor(std::vector<std::int64_t>{0, len}, at::kLong).to(device);
  b.context_len_tensor = at::tensor(std::vector<std::int64_t>{start + len}, at::kLong).to(device);
  // Row i sees the cached prefix and itself (made on the device: no copy).
  b.row_seq = at::zeros({len}, opts.dtype(at::kInt));
  b.row_context = at::arange(start + 1, start + len + 1, opts.dtype(at::kInt));
  b.max_context = start + len;
  return b;
}

AttentionRows MakeAttentionRows(const std::vector<std::int64_t>& query_lens,
                                const std::vector<std::int64_t>& context_lens) {
  AttentionRows rows;
  for (std::size_t s = 0; s < query_lens.size() && s < context_lens.size(); ++s) {
    const std::int64_t n = query_lens[s], context = context_lens[s];
    for (std::int64_t i = 0; i < n; ++i) {
      rows.seq.push_back(static_cast<std::int64_t>(s));
      rows.context.push_back(context - n + i + 1);
    }
    rows.max_context = std::max(rows.max_context, context);
  }
  return rows;
}

}  // namespace ropeserve
