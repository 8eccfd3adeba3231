#include "server/runner/model_runner.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <unordered_map>
#include <vector>

#include "server/models/paged_model.h"

namespace ropeserve {

namespace {

// The vectors, concatenated, as one int64 tensor on `device`: built in one
// host buffer (pinned when the device is a GPU) and copied in one
// asynchronous transfer on the current stream, so that a step's metadata
// costs one copy and no synchronization. Callers take narrow() views.
at::Tensor ToDevice(std::initializer_list<const std::vector<std::int64_t>*> parts, at::Device device) {
  std::int64_t total = 0;
  for (const auto* p : parts) total += static_cast<std::int64_t>(p->size());
  at::Tensor host = at::empty({total}, at::TensorOptions().dtype(at::kLong).pinned_memory(device.is_cuda()));
  std::int64_t* out = host.data_ptr<std::int64_t>();
  for (const auto* p : parts) out = std::copy(p->begin(), p->end(), out);
  return device.is_cpu() ? host : host.to(device, /*non_blocking=*/true);
}

// Each live request's block table as a row of one persistent tensor; rows
// are reused when requests end and the tensor grows (doubling rows) when
// more requests are live than it has rows.
class BlockTableRows {
 public:
  BlockTableRows(std::int64_t max_blocks, at::Device device) : max_blocks_(max_blocks), device_(device) {}

  // Applies the plan's diffs; a table longer than max_blocks is an error.
  // The new entries of all sequences are written by one scatter from one
  // host buffer (one transfer on a device, not one per sequence).
  Status Apply(const StepPlan& plan) {
    for (RequestId id : plan.removed) {
      auto it = rows_.find(id);
      if (it == rows_.end()) continue;
      free_rows_.push_back(it->second.row);
      rows_.erase(it);
    }
    std::vector<std::int64_t> at_row, at_col, block;
    for (const auto& s : plan.sequences) {
      auto it = rows_.find(s.request_id);
      if (it == rows_.end()) it = rows_.emplace(s.request_id, Row{Take(), 0}).first;
      Row& r = it->second;
      if (s.reset_blocks) r.length = 0;
      if (r.length + static_cast<std::int64_t>(s.new_blocks.size()) > max_blocks_)
        return Internal("a block table outgrew the runner's rows");
      for (const BlockId b : s.new_blocks) {  // only the new entries are written
        at_row.push_back(r.row);
        at_col.push_back(r.length++);
        block.push_back(b);
      }
    }
    if (!block.empty()) {
      const at::Tensor idx = ToDevice({&at_row, &at_col, &block}, device_);
      const auto n = static_cast<std::int64_t>(block.size());
      table_.index_put_({idx.narrow(0, 0, n), idx.narrow(0, n, n)}, idx.narrow(0, 2 * n, n).to(at::kInt));
    }
    return Status::Ok();
  }

  // The table row of each of the plan's sequences, in plan order (Gather's index).
  std::vector<std::int64_t> RowsOf(const StepPlan& plan) const {
    std::vector<std::int64_t> rows;
    for (const auto& s : plan.sequences) rows.push_back(rows_.at(s.request_id).row);
    return rows;
  }

  // [S, max_blocks]: the rows `rows` (RowsOf's, on the device).
  at::Tensor Gather(const at::Tensor& rows) const { return table_.index_select(0, rows); }

 private:
  struct Row {
    std::int64_t row = 0;
    std::int64_t length = 0;  // blocks in the table
  };
  std::int64_t Take() {
    if (free_rows_.empty()) {
      const std::int64_t old = table_.defined() ? table_.size(0) : 0;
      const std::int64_t grown = std::max<std::int64_t>(64, 2 * old);
      at::Tensor t = at::zeros({grown, max_blocks_}, at::TensorOptions().dtype(at::kInt).device(device_));
      if (old > 0) t.narrow(0, 0, old).copy_(table_);
      table_ = t;
      for (std::int64_t r = grown - 1; r >= old; --r) free_rows_.push_back(r);
    }
    const std::int64_t r = free_rows_.back();
    free_rows_.pop_back();
    return r;
  }

  const std::int64_t max_blocks_;
  const at::Device device_;
  at::Tensor table_;  // [rows, max_blocks] int32
  std::vector<std::int64_t> free_rows_;
  std::unordered_map<RequestId, Row> rows_;
};

// A step's logits as the host sampler reads them (kept alive by StepLogits::owner).
struct StepRows {
  at::Tensor logits, reduced, argmax, prompt;
  std::vector<std::int64_t> row_index;
};

// Every row is reduced where it lies (logsumexp, max, argmax: three numbers
// back per row); a row comes back whole only when the host sampler needs it
// (sampling, penalties, processors, top logprobs) or its max is NaN (the
// host's argmax decides those). On a GPU a greedy batch so returns a few
// bytes per sequence instead of its [rows, vocab] logits; on the CPU the
// rows are not copied, only marked.
Status ReduceRows(const HostSampler& sampler, const StepPlan& plan, const at::Tensor& logits, StepRows& rows,
                  StepLogits& out) {
  if (logits.dim() != 2 || logits.size(0) != out.rows || logits.size(1) != out.vocab)
    return Internal("the forward returned logits of the wrong shape");
  auto [max, argmax] = logits.max(1);
  // logsumexp and max in one transfer, argmax in another.
  rows.reduced = at::stack({at::logsumexp(logits, 1), max}).to(at::kCPU).contiguous();  // [2, rows]
  rows.argmax = argmax.to(at::kCPU).contiguous();
  out.logsumexp = rows.reduced.data_ptr<float>();
  out.max = out.logsumexp + out.rows;
  out.argmax = rows.argmax.data_ptr<std::int64_t>();
  // On the CPU no row is copied: data is every row, and the index says
  // which are meant; elsewhere data holds the needed rows only, in order.
  const bool in_place = logits.is_cpu();
  std::vector<std::int64_t> whole;
  rows.row_index.reserve(static_cast<std::size_t>(out.rows));
  std::int64_t row = 0;
  for (const auto& s : plan.sequences) {
    if (!s.needs_logits) continue;
    const bool need = sampler.NeedsRow(s.request_id) || std::isnan(out.max[row]);
    rows.row_index.push_back(!need ? -1 : in_place ? row : static_cast<std::int64_t>(whole.size()));
    if (need) whole.push_back(row);
    ++row;
  }
  out.row_index = rows.row_index.data();
  if (whole.empty()) return Status::Ok();
  if (in_place) {
    rows.logits = logits.contiguous();
  } else if (static_cast<std::int64_t>(whole.size()) == out.rows) {
    rows.logits = logits.to(at::kCPU).contiguous();
  } else {
    rows.logits = logits.index_select(0, at::tensor(whole, at::kLong).to(logits.device())).to(at::kCPU).contiguous();
  }
  out.data = rows.logits.data_ptr<float>();
  return Status::Ok();
}

}  // namespace

struct ModelRunner::Impl {
  const PagedModel& model;
  std::int64_t block_size;
  PagedKvCache cache;
  BlockTableRows tables;  // on the device, for the attention kernel
  BlockTables host;       // the same tables on the host, for slot mappings
};

ModelRunner::ModelRunner(const PagedModel& model, std::int64_t num_blocks, std::int64_t block_size)
    : impl_(new Impl{
          model, block_size, model.AllocatePagedKvCache(num_blocks, block_size),
          BlockTableRows((model.config().max_position_embeddings + block_size - 1) / block_size, model.device()),
          BlockTables()}) {}

ModelRunner::~ModelRunner() = default;

std::int64_t ModelRunner::vocab_size() const { return impl_->model.config().vocab_size; }

StatusOr<StepLogits> ModelRunner::Forward(const StepPlan& plan) {
  const std::int64_t bs = impl_->block_size;
  if (plan.block_size != bs) return Internal("step plan block size differs from the KV cache's");
  RS_RETURN_IF_ERROR(impl_->tables.Apply(plan));
  impl_->host.Apply(plan);
  StepLogits out;
  out.vocab = vocab_size();
  if (plan.sequences.empty()) return out;
  // Per-step data: the packed tokens, their positions and cache slots.
  std::vector<std::int64_t> ids, positions, slots, logits_rows, prompt_rows, query_start{0};
  PagedBatch batch;
  for (const auto& s : plan.sequences) {
    const auto n = static_cast<std::int64_t>(s.token_ids.size());
    const std::vector<BlockId>& table = impl_->host.Of(s.request_id);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t pos = s.start_position + i;
      if (pos / bs >= static_cast<std::int64_t>(table.size()))
        return Internal("a block table is too short for its tokens");
      ids.push_back(s.token_ids[i]);
      positions.push_back(pos);
      slots.push_back(static_cast<std::int64_t>(table[pos / bs]) * bs + pos % bs);
    }
    // Prompt logprobs: the row of position p predicts the token at p + 1.
    for (std::size_t j = 0; j < s.prompt_logprob_targets.size(); ++j) {
      const std::int64_t pos = s.prompt_logprobs_from + static_cast<std::int64_t>(j) - 1;
      if (pos < s.start_position || pos >= s.start_position + n)
        return Internal("a prompt logprob target lies outside its chunk");
      prompt_rows.push_back(query_start.back() + pos - s.start_position);
    }
    query_start.push_back(query_start.back() + n);
    if (s.needs_logits) logits_rows.push_back(query_start.back() - 1);
    batch.query_lens.push_back(n);
    batch.context_lens.push_back(s.context_length());
  }
  // Every per-step tensor is a view of one transfer (the attention rows
  // first: one int32 conversion of both).
  const std::vector<std::int64_t> table_rows = impl_->tables.RowsOf(plan);
  const AttentionRows attention = MakeAttentionRows(batch.query_lens, batch.context_lens);
  const at::Tensor meta = ToDevice({&attention.seq, &attention.context, &table_rows, &query_start, &batch.context_lens,
                                    &ids, &positions, &slots, &logits_rows, &prompt_rows},
                                   impl_->model.device());
  std::int64_t offset = 0;
  auto take = [&](const std::vector<std::int64_t>& v) {
    const at::Tensor t = meta.narrow(0, offset, static_cast<std::int64_t>(v.size()));
    offset += static_cast<std::int64_t>(v.size());
    return t;
  };
  const auto rows_n = static_cast<std::int64_t>(attention.seq.size());
  offset = 2 * rows_n;
  const at::Tensor attention_rows = meta.narrow(0, 0, 2 * rows_n).to(at::kInt);
  batch.row_seq = attention_rows.narrow(0, 0, rows_n);
  batch.row_context = attention_rows.narrow(0, rows_n, rows_n);
  batch.max_context = attention.max_context;
  batch.block_table_tensor = impl_->tables.Gather(take(table_rows));
  batch.query_start = take(query_start);
  batch.context_len_tensor = take(batch.context_lens);
  batch.token_ids = take(ids);
  batch.positions = take(positions);
  batch.slot_mapping = take(slots);
  batch.logits_indices = take(logits_rows);
  if (!prompt_rows.empty()) batch.prompt_logits_indices = take(prompt_rows);

  auto rows = std::make_shared<StepRows>();
  out.rows = static_cast<std::int64_t>(logits_rows.size());
  // A step of prefill chunks only writes K/V (and prompt logits when asked).
  at::Tensor logits = impl_->model.ForwardPaged(batch, impl_->cache, prompt_rows.empty() ? nullptr : &rows->prompt);
  if (!prompt_rows.empty()) {
    rows->prompt = rows->prompt.to(at::kCPU).contiguous();
    out.prompt_data = rows->prompt.data_ptr<float>();
    out.prompt_rows = rows->prompt.size(0);
  }
  if (out.rows > 0) RS_RETURN_IF_ERROR(ReduceRows(sampler(), plan, logits, *rows, out));
  out.owner = rows;
  return out;
}

}  // namespace ropeserve
