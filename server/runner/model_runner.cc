#include "server/runner/model_runner.h"

#include <ATen/ATen.h>

#include "server/models/decoder.h"

namespace ropeserve {

struct ModelRunner::Impl {
  const DecoderModel& model;
  std::int64_t block_size;
  PagedKvCache cache;
};

ModelRunner::ModelRunner(const DecoderModel& model, std::int64_t num_blocks, std::int64_t block_size)
    : impl_(new Impl{model, block_size, model.AllocatePagedKvCache(num_blocks, block_size)}) {}

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
  const auto opts = at::TensorOptions().dtype(at::kLong);
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
  auto logits = std::make_shared<at::Tensor>(impl_->model.ForwardPaged(batch, impl_->cache).contiguous());
  out.data = logits->data_ptr<float>();
  out.owner = logits;
  return out;
}

}  // namespace ropeserve
