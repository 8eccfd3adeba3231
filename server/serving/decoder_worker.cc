#include "server/serving/decoder_worker.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "server/models/decoder.h"
#include "server/models/decoder_ops.h"
#include "server/models/paged_model.h"

namespace ropeserve {

namespace {

// EngineOptions::inject_faults_every: every N-th step throws, as LibTorch
// does when an allocation fails.
class FaultInjector final : public ModelExecutor {
 public:
  FaultInjector(std::unique_ptr<ModelExecutor> inner, std::int64_t every) : inner_(std::move(inner)), every_(every) {}
  StatusOr<StepOutput> Execute(const StepPlan& plan) override {
    if (++calls_ % every_ == 0) throw std::runtime_error("injected fault (ROPESERVE_INJECT_FAULTS)");
    return inner_->Execute(plan);
  }
  std::int64_t vocab_size() const override { return inner_->vocab_size(); }

 private:
  std::unique_ptr<ModelExecutor> inner_;
  std::int64_t every_;
  std::int64_t calls_ = 0;
};

}  // namespace

StatusOr<service::EngineOptions> ResolveEngineOptions(const DecoderModel& model, service::EngineOptions options) {
  const ModelConfig& c = model.config();
  if (options.scheduler.max_model_len <= 0) options.scheduler.max_model_len = c.max_position_embeddings;
  if (options.scheduler.max_model_len > c.max_position_embeddings)
    return InvalidArgument("--max-model-len " + std::to_string(options.scheduler.max_model_len) +
                           " exceeds the model's max_position_embeddings " + std::to_string(c.max_position_embeddings));
  RS_RETURN_IF_ERROR(options.scheduler.Validate());
  if (options.block_size < 1 || options.block_size > 1024) return InvalidArgument("--block-size must be in [1, 1024]");
  if (!(options.qa_token_share >= 0 && options.qa_token_share < 1))
    return InvalidArgument("the QA token share must be in [0, 1)");
  return options;
}

bool UsesCudaGraphs(const DecoderModel& model, const service::EngineOptions& options) {
  return model.device().is_cuda() && !options.enforce_eager && model.CanCaptureGraphs();
}

StatusOr<std::int64_t> DeviceKvBudget(const DecoderModel& model, std::int64_t profile_tokens, std::int64_t block_size,
                                      double utilization, std::int64_t graph_seqs, std::int64_t graph_context) {
  if (!(utilization > 0 && utilization <= 1)) return InvalidArgument("--gpu-memory-utilization must be in (0, 1]");
  if (profile_tokens < 1 || block_size < 1) return InvalidArgument("the profiling forward needs tokens and blocks");
#ifdef ROPESERVE_HAVE_CUDA
  const at::Device device = model.device();
  // One prefill chunk of the step's largest size, on a cache just big
  // enough: the caching allocator keeps its peak reserved afterwards, so the
  // device's free memory now excludes weights, context and activations.
  const std::int64_t n = std::min(profile_tokens, model.config().max_position_embeddings);
  const std::int64_t blocks = (n + block_size - 1) / block_size;
  {
    PagedKvCache cache = model.AllocatePagedKvCache(blocks, block_size);
    (void)model
        .ForwardPaged(ContiguousChunk(std::vector<std::int64_t>(static_cast<std::size_t>(n), 0), 0, blocks, device),
                      cache, nullptr)
        .to(at::kCPU);  // waits for the device
  }
  // The decode graphs' pool: a forward of their largest bucket, shaped as
  // captured (one logits row per token, the workspace sized for the
  // cache's capacity per sequence), measured by the allocator's peak, and
  // the [bucket, vocab] float32 logits buffer the graphs share.
  std::int64_t graph_bytes = 0;
  if (graph_seqs > 0) {
    const std::int64_t s = std::min(graph_seqs, model.config().max_position_embeddings);
    const std::int64_t gblocks = (s + block_size - 1) / block_size;
    PagedKvCache cache = model.AllocatePagedKvCache(gblocks, block_size);
    const AllocatorBytes before = GetAllocatorBytes(device);
    ResetAllocatorPeak(device);
    PagedBatch decode = ContiguousChunk(std::vector<std::int64_t>(static_cast<std::size_t>(s), 0), 0, gblocks, device);
    decode.max_context = std::max(graph_context, s);
    (void)model.ForwardPaged(decode, cache, nullptr).to(at::kCPU);
    graph_bytes = std::max<std::int64_t>(0, GetAllocatorBytes(device).peak - before.current) +
                  s * model.config().vocab_size * static_cast<std::int64_t>(sizeof(float));
  }
  const DeviceMemory memory = GetDeviceMemory(device);
  if (memory.total <= 0) return FailedPrecondition("cannot read " + device.str() + "'s memory");
  const std::int64_t total = memory.total, in_use = memory.total - memory.free;
  const auto budget = static_cast<std::int64_t>(utilization * static_cast<double>(total)) - in_use - graph_bytes;
  auto gib = [](std::int64_t b) { return std::to_string(static_cast<double>(b) / (1 << 30)).substr(0, 6) + " GiB"; };
  if (budget <= 0)
    return FailedPrecondition("--gpu-memory-utilization " + std::to_string(utilization).substr(0, 5) + " of " +
                              device.str() + "'s " + gib(total) + " leaves nothing for the KV cache: " + gib(in_use) +
                              " in use after the weights and a profiling forward of " + std::to_string(n) + " tokens" +
                              (graph_bytes > 0 ? ", " + gib(graph_bytes) + " kept for the CUDA graphs" : "") +
                              "; raise it or lower --max-num-batched-tokens" +
                              (graph_bytes > 0 ? " or --max-num-seqs (or --enforce-eager)" : ""));
  return budget;
#else
  return InvalidArgument("this build has CPU workers only (its LibTorch has no CUDA)");
#endif
}

StatusOr<KvCacheSize> SizeDecoderKvCache(const DecoderModel& model, const service::EngineOptions& options) {
  std::int64_t available = -1;  // the host's memory
  if (model.device().is_cuda()) {
    const bool graphs = UsesCudaGraphs(model, options);
    RS_ASSIGN_OR_RETURN(available,
                        DeviceKvBudget(model, options.scheduler.max_num_batched_tokens, options.block_size,
                                       options.gpu_memory_utilization, graphs ? options.scheduler.max_num_seqs : 0,
                                       RunnerContextBlocks(model.config().max_position_embeddings,
                                                           options.scheduler.max_model_len, options.block_size) *
                                           options.block_size));
  }
  RS_ASSIGN_OR_RETURN(KvCacheSize kv,
                      SizeKvCacheForEngine(options.kv_cache_memory, model.KvBytesPerToken(), options.block_size,
                                           options.scheduler.max_model_len, options.scheduler.max_num_seqs, available));
  if (kv.num_blocks > (1LL << 31) - 1) return InvalidArgument("--kv-cache-memory is too large");
  return kv;
}

namespace {

// The host KV tier of --kv-offload-memory, in the runner and the engine's
// config (nothing for "" or "0").
Status AddOffloadTier(const DecoderModel& model, const service::EngineOptions& options, DecoderWorker& worker) {
  const std::string& spec = options.kv_offload_memory;
  if (spec.empty() || spec == "0") {
    if (!options.kv_offload_path.empty())
      return InvalidArgument("--kv-offload-path holds the tier of --kv-offload-memory: give that its size");
    return Status::Ok();
  }
  if (!options.kv_offload_path.empty() && !model.device().is_cpu())
    return InvalidArgument("--kv-offload-path is for CPU workers (a CUDA worker's tier is pinned host memory)");
  if (!options.scheduler.enable_prefix_caching)
    return InvalidArgument(
        "--kv-offload-memory keeps the prefix cache's evicted blocks: it needs prefix caching (drop "
        "--no-enable-prefix-caching)");
  RS_ASSIGN_OR_RETURN(std::int64_t bytes, ParseKvCacheMemory(spec, AvailableHostMemory(), "--kv-offload-memory"));
  const std::int64_t block_bytes = model.KvBytesPerToken() * options.block_size;
  const std::int64_t slots = std::min<std::int64_t>(bytes / block_bytes, (1LL << 31) - 1);
  if (slots < 1)
    return InvalidArgument("--kv-offload-memory " + spec + " holds no block (one is " + std::to_string(block_bytes) +
                           " bytes)");
  try {
    worker.runner->AllocateOffloadTier(slots, options.kv_offload_path);
  } catch (const std::exception& e) {
    if (!options.kv_offload_path.empty())
      return Status(ErrorCode::kResourceExhausted, "--kv-offload-path " + options.kv_offload_path + ": " + e.what());
    return Status(ErrorCode::kResourceExhausted, "--kv-offload-memory " + spec + ": cannot allocate " +
                                                     std::to_string(slots * block_bytes) + " bytes of host memory");
  }
  worker.kv_offload = KvCacheSize{slots, slots * options.block_size, slots * block_bytes};
  worker.engine.kv_offload_blocks = static_cast<int>(slots);
  worker.engine.kv_offload_mover = worker.runner;
  return Status::Ok();
}

}  // namespace

StatusOr<DecoderWorker> BuildDecoderWorker(const DecoderModel& model, const service::EngineOptions& options,
                                           const KvCacheSize& kv, RunnerDiagnostics diagnostics) {
  if (kv.num_blocks < 1 || kv.num_blocks > (1LL << 31) - 1) return InvalidArgument("the KV cache has no blocks");
  DecoderWorker worker;
  worker.kv = kv;
  worker.engine.scheduler = options.scheduler;
  worker.engine.encoder_token_share = options.qa_token_share;
  worker.engine.num_blocks = static_cast<int>(kv.num_blocks);
  worker.engine.block_size = options.block_size;
  worker.engine.eos_token_ids.assign(model.config().eos_token_ids.begin(), model.config().eos_token_ids.end());
  worker.engine.block_hasher = options.block_hasher;
  worker.engine.kv_events = options.kv_events;
  RunnerOptions ro;
  ro.max_num_batched_tokens = options.scheduler.max_num_batched_tokens;
  ro.max_num_seqs = options.scheduler.max_num_seqs;
  ro.max_model_len = options.scheduler.max_model_len;
  // CUDA workers pad decode steps to the graphs' buckets and replay them.
  ro.cuda_graphs = UsesCudaGraphs(model, options);
  ro.pad_decode = ro.cuda_graphs;
  ro.sampling = diagnostics.sampling;
  ro.time_phases = diagnostics.time_phases;
  auto runner = std::make_unique<ModelRunner>(model, kv.num_blocks, options.block_size, ro);
  worker.runner = runner.get();
  RS_RETURN_IF_ERROR(AddOffloadTier(model, options, worker));
  if (ro.cuda_graphs) {
    const Status captured = runner->CaptureDecodeGraphs();
    worker.execution = captured.ok()
                           ? std::to_string(runner->captured_graphs()) + " CUDA graphs for decode batches of up to " +
                                 std::to_string(ro.max_num_seqs) + " sequences (" + runner->graph_reduction() +
                                 "), other steps eager"
                           : "eager (" + captured.ToString() + ")";
  }
  worker.executor = std::move(runner);
  if (options.inject_faults_every > 0)
    worker.executor = std::make_unique<FaultInjector>(std::move(worker.executor), options.inject_faults_every);
  return worker;
}

}  // namespace ropeserve
