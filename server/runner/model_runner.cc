#include "server/runner/model_runner.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/engine/scheduler.h"
#ifdef ROPESERVE_HAVE_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <climits>
#include <map>

#include "kernels/cuda/torch_glue.h"
#endif
#include "server/models/paged_model.h"
#include "server/models/upload_buffer.h"
#include "server/runner/kv_tier.h"

namespace ropeserve {

namespace {

// Each live request's block table as a row of one persistent tensor; rows
// are reused when requests end and the tensor grows (doubling rows) when
// more requests are live than it has rows. A step's sequences' rows are
// gathered into a persistent [max_num_seqs, max_blocks] tensor.
class BlockTableRows {
 public:
  BlockTableRows(std::int64_t max_blocks, std::int64_t max_seqs, at::Device device)
      : max_blocks_(max_blocks), device_(device), diffs_(3 * 1024, device) {
    Grow(std::max<std::int64_t>(64, max_seqs));
    ReserveGathered(max_seqs);
  }

  // Applies the plan's diffs; a table longer than max_blocks is an error.
  // The new entries of all sequences are written by one scatter from one
  // upload (one transfer on a device, not one per sequence).
  Status Apply(const StepPlan& plan) {
    for (RequestId id : plan.removed) {
      auto it = rows_.find(id);
      if (it == rows_.end()) continue;
      free_rows_.push_back(it->second.row);
      rows_.erase(it);
    }
    std::int64_t n = 0;
    for (const auto& s : plan.sequences) n += static_cast<std::int64_t>(s.new_blocks.size());
    diffs_.Reserve(3 * n);
    std::int64_t* at_row = diffs_.host();
    std::int64_t* at_col = at_row + n;
    std::int64_t* block = at_col + n;
    std::int64_t k = 0;
    for (const auto& s : plan.sequences) {
      auto it = rows_.find(s.request_id);
      if (it == rows_.end()) it = rows_.emplace(s.request_id, Row{Take(), 0}).first;
      Row& r = it->second;
      if (s.reset_blocks) r.length = 0;
      if (r.length + static_cast<std::int64_t>(s.new_blocks.size()) > max_blocks_)
        return Internal("a block table outgrew the runner's rows");
      for (const BlockId b : s.new_blocks) {  // only the new entries are written
        at_row[k] = r.row;
        at_col[k] = r.length++;
        block[k++] = b;
      }
    }
    if (n > 0) {
      const at::Tensor idx = diffs_.Upload(3 * n);
      table_.index_put_({idx.narrow(0, 0, n), idx.narrow(0, n, n)}, idx.narrow(0, 2 * n, n).to(at::kInt));
    }
    return Status::Ok();
  }

  // The table row of a live request.
  std::int64_t RowOf(RequestId id) const { return rows_.at(id).row; }

  // Room for `seqs` gathered rows; true when the gathered tensor grew.
  bool ReserveGathered(std::int64_t seqs) {
    if (gathered_.defined() && gathered_.size(0) >= seqs) return false;
    gathered_ =
        at::zeros({std::max<std::int64_t>(1, seqs), max_blocks_}, at::TensorOptions().dtype(at::kInt).device(device_));
    return true;
  }
  // [S, max_blocks]: the table rows `rows` [S] (on the device), gathered
  // into the first S rows of the persistent tensor (ReserveGathered first).
  at::Tensor Gather(const at::Tensor& rows) {
    at::Tensor out = gathered_.narrow(0, 0, rows.size(0));
    at::index_select_out(out, table_, 0, rows);
    return out;
  }
  std::int64_t max_blocks() const { return max_blocks_; }
  const void* gathered_address() const { return gathered_.data_ptr(); }

 private:
  struct Row {
    std::int64_t row = 0;
    std::int64_t length = 0;  // blocks in the table
  };
  void Grow(std::int64_t rows) {
    const std::int64_t old = table_.defined() ? table_.size(0) : 0;
    at::Tensor t = at::zeros({rows, max_blocks_}, at::TensorOptions().dtype(at::kInt).device(device_));
    if (old > 0) t.narrow(0, 0, old).copy_(table_);
    table_ = t;
    for (std::int64_t r = rows - 1; r >= old; --r) free_rows_.push_back(r);
  }
  std::int64_t Take() {
    if (free_rows_.empty()) Grow(2 * table_.size(0));
    const std::int64_t r = free_rows_.back();
    free_rows_.pop_back();
    return r;
  }

  const std::int64_t max_blocks_;
  const at::Device device_;
  UploadBuffer<std::int64_t> diffs_;  // rows, columns, blocks of a step's new entries
  at::Tensor table_;                  // [rows, max_blocks] int32
  at::Tensor gathered_;               // [max_num_seqs, max_blocks] int32
  std::vector<std::int64_t> free_rows_;
  std::unordered_map<RequestId, Row> rows_;
};

// Where a step's metadata lies in the step buffer: a function of the step's
// shape only (S sequences, T tokens, R logits rows, P prompt rows), so
// that steps of one shape read the same addresses.
struct StepLayout {
  std::int64_t S = 0, T = 0, R = 0, P = 0;
  std::int64_t query_start() const { return 0; }  // [S + 1]
  std::int64_t context() const { return S + 1; }  // [S]
  std::int64_t table_rows() const { return 2 * S + 1; }
  std::int64_t ids() const { return 3 * S + 1; }  // [T]
  std::int64_t positions() const { return ids() + T; }
  std::int64_t slots() const { return positions() + T; }
  std::int64_t logits_rows() const { return slots() + T; }        // [R]
  std::int64_t prompt_rows() const { return logits_rows() + R; }  // [P]
  std::int64_t size() const { return prompt_rows() + P; }
};

}  // namespace

std::int64_t RunnerContextBlocks(std::int64_t max_position_embeddings, std::int64_t max_model_len,
                                 std::int64_t block_size) {
  const std::int64_t len =
      max_model_len > 0 ? std::min(max_model_len, max_position_embeddings) : max_position_embeddings;
  const std::int64_t bs = std::max<std::int64_t>(1, block_size);
  return (len + bs - 1) / bs;
}

struct ModelRunner::Impl {
  Impl(const PagedModel& m, std::int64_t num_blocks, std::int64_t bs, const RunnerOptions& o)
      : model(m),
        block_size(bs),
        options(o),
        cache(m.AllocatePagedKvCache(num_blocks, bs)),
        tables(RunnerContextBlocks(m.config().max_position_embeddings, o.max_model_len, bs),
               std::max<std::int64_t>(1, o.max_num_seqs), m.device()),
        buckets(o.pad_decode ? DecodeBuckets(o.max_num_seqs) : std::vector<std::int64_t>{}),
        step(StepLayout{o.max_num_seqs, o.max_num_batched_tokens, o.max_num_seqs, kMaxPromptLogprobRows}.size(),
             m.device()),
        sampler(m.config().vocab_size, m.device(), o.sampling) {}

  // The smallest bucket holding n sequences; 0 when none does (or padding is off).
  std::int64_t BucketFor(std::int64_t n) const {
    for (const std::int64_t b : buckets)
      if (b >= n) return b;
    return 0;
  }
  // Steps that pad: one token per sequence, each wanting logits, no prompt logprobs.
  static bool DecodeOnly(const StepPlan& plan) {
    for (const auto& s : plan.sequences)
      if (s.token_ids.size() != 1 || !s.needs_logits || !s.prompt_logprob_targets.empty()) return false;
    return true;
  }

  // A step's batch as the forward reads it.
  struct Prepared {
    PagedBatch batch;
    StepLayout layout;
    std::int64_t padding = 0;    // fillers at the end
    std::int64_t real_rows = 0;  // logits rows of the plan's sequences
  };
  StatusOr<Prepared> Prepare(const StepPlan& plan, std::int64_t padding);
  // The logits of the captured graph of `bucket` after replaying it on the
  // batch Prepare just uploaded, and in `reduced` its rows' reduction when
  // the graph has one (else null); undefined when there is no graph.
  at::Tensor Replay(std::int64_t bucket, const ReducedRows*& reduced);
  void DropGraphs();
#ifdef ROPESERVE_HAVE_CUDA
  // One graph per bucket (CaptureDecodeGraphs), with or without the rows'
  // reduction at its end; LibTorch's errors are thrown (c10::Error).
  Status CaptureGraphs(bool reduce);
#endif
  void WaitForDevice();  // the current stream of a CUDA device; nothing on the CPU

  const PagedModel& model;
  std::int64_t block_size;
  RunnerOptions options;
  PagedKvCache cache;
  std::unique_ptr<KvTier> tier;  // the host KV tier (AllocateOffloadTier); null: none
  BlockTableRows tables;         // on the device, for the attention kernel
  BlockTables host;              // the same tables on the host, for slot mappings
  std::vector<std::int64_t> buckets;
  UploadBuffer<std::int64_t> step;  // the step buffers (StepLayout)
  Sampler sampler;
  RunnerStats stats;
#ifdef ROPESERVE_HAVE_CUDA
  struct DecodeGraph {
    at::cuda::CUDAGraph graph;
    at::Tensor logits;    // [bucket, vocab] float32: rows of graph_logits
    ReducedRows reduced;  // its rows' reduction (host null: the graph has none)
  };
  std::map<std::int64_t, std::unique_ptr<DecodeGraph>> graphs;
  // [largest bucket, vocab] float32: every graph writes its logits here, so
  // the graphs' outputs do not pile up in their pool (each graph's own
  // logits are freed there after its capture, for the next one to reuse).
  at::Tensor graph_logits;
  // The same for the reduction each graph ends with (LogitsSummary's packed
  // int32 and argmax int64 for its rows) and the copy of the packed form
  // it queues into pinned host memory. Undefined: the graphs reduce nothing.
  at::Tensor graph_packed, graph_argmax, graph_host;
  std::string graph_reduction_error;  // why the graphs were captured without it
#endif
};

std::vector<std::int64_t> ModelRunner::DecodeBuckets(std::int64_t max_num_seqs) {
  std::vector<std::int64_t> out;
  for (std::int64_t b : {1, 2, 4, 8})
    if (b <= max_num_seqs) out.push_back(b);
  for (std::int64_t b = 16; b <= max_num_seqs; b += 8) out.push_back(b);
  if (max_num_seqs > 0 && (out.empty() || out.back() != max_num_seqs)) out.push_back(max_num_seqs);
  return out;
}

ModelRunner::ModelRunner(const PagedModel& model, std::int64_t num_blocks, std::int64_t block_size,
                         RunnerOptions options)
    : impl_(new Impl(model, num_blocks, block_size, options)) {}

ModelRunner::~ModelRunner() = default;

std::int64_t ModelRunner::vocab_size() const { return impl_->model.config().vocab_size; }

const RunnerStats& ModelRunner::stats() const { return impl_->stats; }

void ModelRunner::AllocateOffloadTier(std::int64_t num_slots, const std::string& directory) {
  impl_->tier = std::make_unique<KvTier>(impl_->cache, num_slots, directory);
}

void ModelRunner::SaveBlocks(std::span<const std::pair<BlockId, int>> moves) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> block_slot(moves.begin(), moves.end());
  impl_->tier->Save(impl_->cache, block_slot);
}

void ModelRunner::LoadBlocks(std::span<const std::pair<int, BlockId>> moves) {
  std::vector<std::pair<std::int64_t, std::int64_t>> block_slot;
  for (const auto& [slot, block] : moves) block_slot.emplace_back(block, slot);
  impl_->tier->Load(impl_->cache, block_slot);
}

std::vector<const void*> ModelRunner::BufferAddresses() const {
  return {impl_->step.device_address(), impl_->step.host_address(), impl_->tables.gathered_address()};
}

// Writes the step's metadata into the staging buffer, uploads it in one
// copy and builds the batch's tensors as views of it. `plan`'s sequences
// first, then `padding` fillers: one token each at position 0 in no slot,
// seeing one cached token of table row 0 (whatever it holds: their rows are
// not read), wanting logits (so a padded step has a fixed shape).
StatusOr<ModelRunner::Impl::Prepared> ModelRunner::Impl::Prepare(const StepPlan& plan, std::int64_t padding) {
  const std::int64_t bs = block_size;
  const auto n = static_cast<std::int64_t>(plan.sequences.size());
  Prepared p;
  std::int64_t real_tokens = 0, prompt_n = 0;
  for (const auto& s : plan.sequences) {
    real_tokens += static_cast<std::int64_t>(s.token_ids.size());
    p.real_rows += s.logits_rows();
    prompt_n += static_cast<std::int64_t>(s.prompt_logprob_targets.size());
  }
  p.padding = padding;
  p.layout = StepLayout{n + padding, real_tokens + padding, p.real_rows + padding, prompt_n};
  const StepLayout& at = p.layout;
  const bool grew = step.Reserve(at.size());
  if (tables.ReserveGathered(at.S) || grew) {
    ++stats.buffer_growths;
    DropGraphs();  // they read the old addresses
  }

  std::int64_t* h = step.host();
  std::int64_t* query_start = h + at.query_start();
  std::int64_t* context = h + at.context();
  std::int64_t* table_rows = h + at.table_rows();
  std::int64_t* ids = h + at.ids();
  std::int64_t* positions = h + at.positions();
  std::int64_t* slots = h + at.slots();
  std::int64_t* logits_rows = h + at.logits_rows();
  std::int64_t* prompt_rows = h + at.prompt_rows();
  PagedBatch& batch = p.batch;
  query_start[0] = 0;
  std::int64_t row = 0, logits_n = 0, prompt_k = 0, longest = 0;
  // Sequence i's rows end at `row`: its attention entries.
  auto end_sequence = [&](std::int64_t i, std::int64_t context_len, std::int64_t table_row) {
    query_start[i + 1] = row;
    context[i] = context_len;
    table_rows[i] = table_row;
    longest = std::max(longest, context_len);
  };
  for (std::int64_t i = 0; i < n; ++i) {
    const auto& s = plan.sequences[static_cast<std::size_t>(i)];
    const auto len = static_cast<std::int64_t>(s.token_ids.size());
    const std::vector<BlockId>& table = host.Of(s.request_id);
    for (std::int64_t j = 0; j < len; ++j) {
      const std::int64_t pos = s.start_position + j;
      if (pos / bs >= static_cast<std::int64_t>(table.size()))
        return Internal("a block table is too short for its tokens");
      ids[row + j] = s.token_ids[static_cast<std::size_t>(j)];
      positions[row + j] = pos;
      slots[row + j] = static_cast<std::int64_t>(table[static_cast<std::size_t>(pos / bs)]) * bs + pos % bs;
    }
    // Prompt logprobs: the row of position p predicts the token at p + 1.
    for (std::size_t j = 0; j < s.prompt_logprob_targets.size(); ++j) {
      const std::int64_t pos = s.prompt_logprobs_from + static_cast<std::int64_t>(j) - 1;
      if (pos < s.start_position || pos >= s.start_position + len)
        return Internal("a prompt logprob target lies outside its chunk");
      prompt_rows[prompt_k++] = row + pos - s.start_position;
    }
    row += len;
    end_sequence(i, s.context_length(), tables.RowOf(s.request_id));
    // The last token's row, and with drafts each draft's row before it.
    for (std::int64_t j = s.logits_rows(); j > 0; --j) logits_rows[logits_n++] = row - j;
  }
  for (std::int64_t i = n; i < at.S; ++i) {
    ids[row] = 0;
    positions[row] = 0;
    slots[row] = kPaddingSlot;
    logits_rows[logits_n++] = row;
    ++row;
    end_sequence(i, 1, 0);
  }

  // One copy; every per-step tensor is a view of it.
  const at::Tensor meta = step.Upload(at.size());
  auto view = [&](std::int64_t offset, std::int64_t size) { return meta.narrow(0, offset, size); };
  batch.query_start = view(at.query_start(), at.S + 1);
  batch.context_len_tensor = view(at.context(), at.S);
  batch.block_table_tensor = tables.Gather(view(at.table_rows(), at.S));
  batch.token_ids = view(at.ids(), at.T);
  batch.positions = view(at.positions(), at.T);
  batch.slot_mapping = view(at.slots(), at.T);
  batch.logits_indices = view(at.logits_rows(), at.R);
  if (at.P > 0) batch.prompt_logits_indices = view(at.prompt_rows(), at.P);
  batch.max_context = longest;
  return p;
}

StatusOr<StepOutput> ModelRunner::Execute(const StepPlan& plan) {
  // The whole step, the rows' reduction and sampling included: no autograd
  // bookkeeping (version counters, views' metadata) on any tensor it makes.
  c10::InferenceMode guard;
  Impl& im = *impl_;
  if (plan.block_size != im.block_size) return Internal("step plan block size differs from the KV cache's");
  RS_RETURN_IF_ERROR(im.tables.Apply(plan));
  im.host.Apply(plan);
  im.sampler.Apply(plan);
  if (plan.sequences.empty()) return StepOutput{};
  ++im.stats.steps;
  using Clock = std::chrono::steady_clock;
  auto lap = [last = Clock::now()](std::uint64_t& into) mutable {
    const auto now = Clock::now();
    into += static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count());
    last = now;
  };

  // Padded to a bucket when it is a decode step that fits one.
  const auto n = static_cast<std::int64_t>(plan.sequences.size());
  const std::int64_t bucket = im.buckets.empty() || !Impl::DecodeOnly(plan) ? 0 : im.BucketFor(n);
  if (bucket > 0) {
    ++im.stats.padded_steps;
    im.stats.padding_rows += static_cast<std::uint64_t>(bucket - n);
  }
  RS_ASSIGN_OR_RETURN(Impl::Prepared step, im.Prepare(plan, bucket > 0 ? bucket - n : 0));
  lap(im.stats.prepare_ns);

  at::Tensor prompt;
  const ReducedRows* reduced = nullptr;
  at::Tensor logits = im.Replay(bucket, reduced);
  if (logits.defined()) {
    ++im.stats.graph_replays;
  } else {
    // A step of prefill chunks only writes K/V (and prompt logits when asked).
    // The batch is the runner's own: the attention workspace goes on it.
    step.batch.attention_workspace = im.model.AttentionWorkspace(step.batch);
    logits = im.model.ForwardPaged(step.batch, im.cache, step.layout.P == 0 ? nullptr : &prompt);
  }
  if (step.padding > 0) logits = logits.narrow(0, 0, step.real_rows);  // the fillers' rows come last
  if (im.options.time_phases) im.WaitForDevice();
  lap(im.stats.forward_ns);
  auto out = im.sampler.Sample(plan, logits, prompt, reduced);
  im.stats.sampler = im.sampler.stats();
  lap(im.stats.reduce_ns);
  return out;
}

#ifdef ROPESERVE_HAVE_CUDA

// Captured largest first on a side stream, sharing one memory pool (the
// graphs never run at once); each bucket's graph is one eager forward of
// fillers recorded after a warm-up run, reading the step buffers' views
// for that bucket's shape and attending up to the cache's capacity per
// sequence (max_context is fixed in a graph). Each graph ends with its
// rows' reduction and the copy of its packed form to pinned host memory
// (Sampler's ReducedRows), so a greedy decode step is one graph launch and
// one wait; should capturing that fail, the graphs are captured again
// without it (the Sampler then reduces after each replay, as eager steps do).
Status ModelRunner::CaptureDecodeGraphs() {
  Impl& im = *impl_;
  if (!im.options.cuda_graphs || !im.model.device().is_cuda() || im.buckets.empty()) return Status::Ok();
  if (!im.model.CanCaptureGraphs())
    return FailedPrecondition("this model's forward cannot be captured (dynamic RoPE reads lengths on the host)");
  im.graph_reduction_error.clear();
  for (const bool reduce : {true, false}) {
    try {
      const Status captured = im.CaptureGraphs(reduce);
      if (!captured.ok()) im.DropGraphs();
      return captured;
    } catch (const c10::Error& e) {
      im.DropGraphs();
      const std::string why = e.what_without_backtrace();
      if (!reduce) return Internal("capturing the decode graphs failed: " + why);
      im.graph_reduction_error = why;
    }
  }
  return Status::Ok();
}

Status ModelRunner::Impl::CaptureGraphs(bool reduce) {
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, model.device().index());
  c10::cuda::CUDAStreamGuard on_side(side);
  decltype(std::declval<at::cuda::CUDAGraph&>().pool()) pool{0, 0};  // none yet
  const StepPlan none;
  const std::int64_t largest = buckets.back();
  const auto on_device = at::TensorOptions().device(model.device());
  graph_logits = at::empty({largest, model.config().vocab_size}, on_device.dtype(at::kFloat));
  if (reduce) {
    graph_packed = at::empty({4 * largest}, on_device.dtype(at::kInt));
    graph_argmax = at::empty({largest}, on_device.dtype(at::kLong));
    graph_host = at::empty({4 * largest}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  }
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
    const std::int64_t b = *it;
    RS_ASSIGN_OR_RETURN(Prepared step, Prepare(none, b));
    step.batch.max_context = tables.max_blocks() * block_size;
    model.ForwardPaged(step.batch, cache, nullptr);  // warm-up: lazy initialisations happen here
    auto g = std::make_unique<DecodeGraph>();
    g->logits = graph_logits.narrow(0, 0, b);
    at::Tensor packed, argmax;
    if (reduce) {
      packed = graph_packed.narrow(0, 0, 4 * b);
      argmax = graph_argmax.narrow(0, 0, b);
      // The reduction's warm-up too: a check that fails, fails here,
      // outside the capture (where it would leave the stream capturing).
      cuda::SummarizeRowsPackedInto(g->logits, packed, argmax);
      cuda::CopyToHostAsync(graph_host.data_ptr(), packed);
    }
    side.synchronize();
    g->graph.capture_begin(pool);
    g->logits.copy_(model.ForwardPaged(step.batch, cache, nullptr));
    if (reduce) {
      auto [lse, max] = cuda::SummarizeRowsPackedInto(g->logits, packed, argmax);
      cuda::CopyToHostAsync(graph_host.data_ptr(), packed);
      g->reduced =
          ReducedRows{{lse, max, argmax, {}}, graph_host.data_ptr<std::int32_t>(), b, [this] { WaitForDevice(); }};
    }
    g->graph.capture_end();
    if (pool.first == 0 && pool.second == 0) pool = g->graph.pool();
    graphs[b] = std::move(g);
  }
  side.synchronize();
  return Status::Ok();
}

at::Tensor ModelRunner::Impl::Replay(std::int64_t bucket, const ReducedRows*& reduced) {
  reduced = nullptr;
  auto it = graphs.find(bucket);
  if (bucket <= 0 || it == graphs.end()) return {};
  it->second->graph.replay();
  if (it->second->reduced.host != nullptr) reduced = &it->second->reduced;
  return it->second->logits;
}

void ModelRunner::Impl::WaitForDevice() {
  if (model.device().is_cuda()) c10::cuda::getCurrentCUDAStream(model.device().index()).synchronize();
}

void ModelRunner::Impl::DropGraphs() {
  graphs.clear();
  graph_logits = graph_packed = graph_argmax = graph_host = at::Tensor();
}

std::size_t ModelRunner::captured_graphs() const { return impl_->graphs.size(); }

std::string ModelRunner::graph_reduction() const {
  const Impl& im = *impl_;
  if (im.graphs.empty()) return "";
  if (im.graphs.begin()->second->reduced.host != nullptr) return "the rows' reduction inside them";
  return "the rows' reduction after them (capturing it failed: " + im.graph_reduction_error + ")";
}

#else

Status ModelRunner::CaptureDecodeGraphs() { return Status::Ok(); }
at::Tensor ModelRunner::Impl::Replay(std::int64_t, const ReducedRows*& reduced) {
  reduced = nullptr;
  return {};
}
void ModelRunner::Impl::WaitForDevice() {}
void ModelRunner::Impl::DropGraphs() {}
std::size_t ModelRunner::captured_graphs() const { return 0; }
std::string ModelRunner::graph_reduction() const { return ""; }

#endif  // ROPESERVE_HAVE_CUDA

}  // namespace ropeserve
