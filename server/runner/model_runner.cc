#include "server/runner/model_runner.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "server/models/decoder.h"

namespace ropeserve {

struct ModelRunner::Impl {
  const DecoderModel& model;
  std::int64_t block_size;
  PagedKvCache cache;
  bool reference_attention;
};

ModelRunner::ModelRunner(const DecoderModel& model, std::int64_t num_blocks, std::int64_t block_size,
                         bool reference_attention)
    : impl_(new Impl{model, block_size, model.AllocatePagedKvCache(num_blocks, block_size), reference_attention}) {}

ModelRunner::~ModelRunner() = default;

std::int64_t ModelRunner::vocab_size() const { return impl_->model.config().vocab_size; }

StatusOr<StepLogits> ModelRunner::Execute(const StepPlan& plan) {
  const std::int64_t bs = impl_->block_size;
  if (plan.block_size != bs) return Internal("step plan block size differs from the KV cache's");
  std::vector<std::int64_t> ids, positions, slots, logits_rows;
  PagedBatch batch;
  std::int64_t row = 0;
  for (const auto& s : plan.sequences) {
    const auto n = static_cast<std::int64_t>(s.token_ids.size());
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t pos = s.start_position + i;
      ids.push_back(s.token_ids[i]);
      positions.push_back(pos);
      slots.push_back(static_cast<std::int64_t>(s.block_table.at(pos / bs)) * bs + pos % bs);
    }
    row += n;
    if (s.needs_logits) logits_rows.push_back(row - 1);
    batch.block_tables.push_back(s.block_table);
    batch.query_lens.push_back(n);
    batch.context_lens.push_back(s.context_length());
  }
  std::size_t max_blocks = 1;
  for (const auto& t : batch.block_tables) max_blocks = std::max(max_blocks, t.size());
  batch.block_table_tensor = at::zeros({static_cast<std::int64_t>(batch.block_tables.size()),
                                        static_cast<std::int64_t>(max_blocks)}, at::kInt);
  auto* table_ptr = batch.block_table_tensor.data_ptr<std::int32_t>();
  std::vector<std::int64_t> query_start{0};
  for (std::size_t s = 0; s < batch.block_tables.size(); ++s) {
    std::copy(batch.block_tables[s].begin(), batch.block_tables[s].end(), table_ptr + s * max_blocks);
    query_start.push_back(query_start.back() + batch.query_lens[s]);
  }
  batch.reference_attention = impl_->reference_attention;
  const auto opts = at::TensorOptions().dtype(at::kLong);
  batch.query_start = at::tensor(query_start, opts);
  batch.context_len_tensor = at::tensor(batch.context_lens, opts);
  batch.token_ids = at::tensor(ids, opts);
  batch.positions = at::tensor(positions, opts);
  batch.slot_mapping = at::tensor(slots, opts);
  batch.logits_indices = at::tensor(logits_rows, opts);

  StepLogits out;
  out.vocab = vocab_size();
  out.rows = static_cast<std::int64_t>(logits_rows.size());
  if (out.rows == 0) {
    impl_->model.ForwardPaged(batch, impl_->cache);  // prefill chunks only: K/V written, no logits used
    return out;
  }
  struct Rows {
    at::Tensor logits, logsumexp;
  };
  auto rows = std::make_shared<Rows>();
  rows->logits = impl_->model.ForwardPaged(batch, impl_->cache).contiguous();
  rows->logsumexp = at::logsumexp(rows->logits, 1).contiguous();
  out.data = rows->logits.data_ptr<float>();
  out.logsumexp = rows->logsumexp.data_ptr<float>();
  out.owner = rows;
  return out;
}

}  // namespace ropeserve
