// The model runner: turns a StepPlan into the batch's tensors (in exactly
// one place), runs the decoder's paged forward and samples every sequence
// that needs a token, returning only ids and logprobs to the engine.
//
// Persistent state, allocated once on the model's device and updated from
// the plans' diffs (vLLM v1's persistent input batch):
//  - each live request's block table, a row of a [rows, max_blocks] int32
//    tensor (a step scatters only the new entries, then gathers its
//    sequences' rows into a persistent [max_num_seqs, max_blocks] tensor);
//  - the step buffers: one int64 buffer on the device holding a step's
//    metadata (query starts, context lengths, table rows, ids, positions,
//    slots, logits rows, prompt rows), filled from one staging buffer (pinned
//    host memory on a GPU) by one asynchronous copy per step. Its layout
//    depends only on the step's shape, so steps of one shape read the same
//    addresses: what a captured CUDA graph needs. Sized by
//    max_num_batched_tokens and max_num_seqs; a larger step grows it once
//    (counted in RunnerStats, and it drops the captured graphs).
// The staging buffer is rewritten only after the previous step's results
// came back to the host (the sampler's copy back waits for the device), so
// the asynchronous copy never reads a half-written buffer.
//
// Padded decode (RunnerOptions::pad_decode): a step of one-token sequences
// that all want logits is padded to the next bucket (1, 2, 4, 8, then
// steps of 8 up to max_num_seqs) with filler sequences (token 0 at position
// 0, slot kPaddingSlot, context 1) whose rows nobody reads: the shapes CUDA
// graphs are captured at. It runs on the CPU too, where the tests hold it
// equal to the unpadded step.
//
// The step's logits go to the runner's Sampler (server/sampler/sampler.h):
// each row is reduced where it lies (logsumexp, max, argmax); on a CUDA
// device the rows are also processed and drawn there (penalties, logit
// bias, grammar masks, greedy and random draws, top logprobs), so a row
// returns a few numbers; only rows of a processor that cannot describe its
// effect come back whole. On the CPU the host sampler reads the rows in
// place (nothing is copied), and is the oracle the device path is tested
// against.
// Threading: the engine's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/engine/kv_offload.h"
#include "server/engine/model_executor.h"
#include "server/sampler/sampler.h"

namespace ropeserve {

class PagedModel;

struct RunnerOptions {
  // Size the step buffers (the scheduler's limits).
  std::int64_t max_num_batched_tokens = 2048;
  std::int64_t max_num_seqs = 64;
  // The longest sequence (--max-model-len): the width of the block tables
  // and, under CUDA graphs, the context each captured decode step attends up
  // to (its grid and workspace); 0 = the model's max_position_embeddings.
  std::int64_t max_model_len = 0;
  // Pad decode-only steps to the buckets (see above).
  bool pad_decode = false;
  // Replay padded decode steps from CUDA graphs (CaptureDecodeGraphs; CUDA
  // devices only, and only with pad_decode); off: every step runs eager
  // (--enforce-eager).
  bool cuda_graphs = false;
  // Where rows are processed and drawn (server/sampler/sampler.h).
  SamplerPlacement sampling = SamplerPlacement::kAuto;
  // Waits for the device at the end of each timed phase (RunnerStats'
  // *_ns), so a CUDA step's time splits into the host's planning, the
  // forward's execution and the reduction; it serialises the host and the
  // device, so only for diagnosis (`bench`'s batch-1 phases). On the CPU
  // the phases are the same with it or without.
  bool time_phases = false;
};

// The widest context a sequence reaches in a runner with these settings,
// in whole blocks: max_model_len (0: the model's max_position_embeddings),
// at most max_position_embeddings. The block tables' width and, under CUDA
// graphs, the context each captured step attends up to; the worker sizes
// the graphs' workspace from the same figure (server/serving/decoder_worker.cc).
std::int64_t RunnerContextBlocks(std::int64_t max_position_embeddings, std::int64_t max_model_len,
                                 std::int64_t block_size);

// What the runner did, for tests and metrics.
struct RunnerStats {
  std::uint64_t steps = 0;
  std::uint64_t padded_steps = 0;    // decode steps padded to a bucket
  std::uint64_t padding_rows = 0;    // filler sequences added by them
  std::uint64_t buffer_growths = 0;  // steps larger than the step buffers
  std::uint64_t graph_replays = 0;   // steps replayed from a CUDA graph
  SamplerStats sampler;              // the Sampler's (rows drawn by DeviceSampling)
  // Wall time in Forward, by phase, over every non-empty step: the step's
  // plan applied and its metadata uploaded (prepare); the forward launched
  // or replayed, and with RunnerOptions::time_phases run to its end
  // (forward); the rows processed, drawn and copied back (reduce; without
  // time_phases, on a GPU, this includes waiting for the forward).
  std::uint64_t prepare_ns = 0, forward_ns = 0, reduce_ns = 0;
};

// The runner is also the host KV tier's mover (server/engine/kv_offload.h):
// AllocateOffloadTier sizes the tier, a tensor per layer of K and of V in
// host memory (pinned for a CUDA cache), and SaveBlocks / LoadBlocks copy
// whole blocks between it and the cache. On the CPU: one gather and one
// scatter per layer and tensor, done when the call returns. On a CUDA
// device: runs of blocks copied on a stream of the tier's own, ordered by
// events after the forwards queued before the call and before the next
// one; the host does not wait for them.
class ModelRunner final : public ModelExecutor, public KvBlockMover {
 public:
  // Allocates num_blocks x block_size token slots of K/V for every layer and
  // the step buffers. `model` (a DecoderModel when serving; the tests'
  // reference model as their oracle) must outlive the runner.
  ModelRunner(const PagedModel& model, std::int64_t num_blocks, std::int64_t block_size, RunnerOptions options = {});
  ~ModelRunner() override;

  // The plan's step: its batch written, the forward run, its rows sampled
  // by the runner's Sampler.
  StatusOr<StepOutput> Execute(const StepPlan& plan) override;
  std::int64_t vocab_size() const override;
  const RunnerStats& stats() const;
  // The padded decode buckets, ascending (1, 2, 4, 8, 16, 24, ...,
  // max_num_seqs).
  static std::vector<std::int64_t> DecodeBuckets(std::int64_t max_num_seqs);
  // The persistent buffers' data addresses (step buffers on the device and
  // on the host, gathered block tables): constant across steps unless a
  // step outgrew them.
  std::vector<const void*> BufferAddresses() const;

  // Captures one CUDA graph per decode bucket (RunnerOptions::cuda_graphs,
  // on a CUDA device; else nothing to do), after the KV cache exists and
  // before the first step. An error leaves the runner eager and working.
  Status CaptureDecodeGraphs();
  std::size_t captured_graphs() const;
  // Where the captured graphs' steps reduce their rows, for the worker's
  // description: "" without graphs.
  std::string graph_reduction() const;

  // num_slots blocks of K/V in host memory for the tier (once, before the
  // first step). With `directory`: in a file there instead (created,
  // reserved on the disk with posix_fallocate, memory-mapped and unlinked at
  // once, so nothing stays behind): the page cache keeps what fits in
  // memory and the kernel writes the rest to disk (a CPU runner's tier
  // larger than memory). Throws std::runtime_error saying what failed.
  void AllocateOffloadTier(std::int64_t num_slots, const std::string& directory = "");
  void SaveBlocks(std::span<const std::pair<BlockId, int>> moves) override;
  void LoadBlocks(std::span<const std::pair<int, BlockId>> moves) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ropeserve
