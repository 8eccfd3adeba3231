#include "server/models/paged_model.h"

#include <ATen/ATen.h>

namespace ropeserve {

PagedBatch ContiguousChunk(const std::vector<std::int64_t>& tokens, std::int64_t start, std::int64_t num_blocks,
                           at::Device device) {
  const auto len = static_cast<std::int64_t>(tokens.size());
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  PagedBatch b;
  b.token_ids = at::tensor(tokens, at::kLong).to(device);
  b.positions = at::arange(start, start + len, opts);
  b.slot_mapping = b.positions;  // blocks 0, 1, 2, ... in order
  b.logits_indices = at::arange(len, opts);
  b.block_table_tensor = at::arange(num_blocks, opts.dtype(at::kInt)).unsqueeze(0);
  b.query_start = at::tensor(std::vector<std::int64_t>{0, len}, at::kLong).to(device);
  b.context_len_tensor = at::tensor(std::vector<std::int64_t>{start + len}, at::kLong).to(device);
  b.max_context = start + len;
  return b;
}

}  // namespace ropeserve
