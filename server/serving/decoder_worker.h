// The one way a decoder's worker is built, whoever runs it: `serve`
// (ServeDecoder), the offline engine of `generate` and the tests
// (OfflineDecoder) and `bench`. It checks the engine options against the
// model, sizes the paged KV cache (on a CUDA device after profiling what
// the weights, a prefill and the decode graphs take), and builds the
// runner with the decode padding and CUDA graphs a CUDA device gets unless
// enforce_eager, the host KV tier, and the engine's config. So `generate`
// and `bench` measure the runner `serve` runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "server/common/status.h"
#include "server/engine/engine.h"
#include "server/engine/kv_cache_sizing.h"
#include "server/runner/model_runner.h"
#include "server/service/generation_service.h"

namespace ropeserve {

class DecoderModel;

// `options` checked against `model`: max_model_len 0 becomes the model's
// max_position_embeddings (more is refused), the scheduler's limits, the
// block size and the QA token share in range.
StatusOr<service::EngineOptions> ResolveEngineOptions(const DecoderModel& model, service::EngineOptions options);

// Whether the runner pads decode steps to buckets and replays CUDA graphs:
// on a CUDA device that can capture them, unless enforce_eager.
bool UsesCudaGraphs(const DecoderModel& model, const service::EngineOptions& options);

// The context a captured decode graph attends up to per sequence: the
// block tables' capacity (--max-model-len in whole blocks).
std::int64_t GraphContext(std::int64_t max_model_len, std::int64_t block_size);

// The bytes a CUDA worker's KV cache may take, as vLLM's
// --gpu-memory-utilization: `utilization` of the device's memory minus what
// is in use after the weights and one profiling forward of `profile_tokens`
// tokens (the step's largest prefill; its activation peak stays reserved by
// the caching allocator), and minus what the decode CUDA graphs will hold
// when `graph_seqs` > 0 (their largest bucket): a decode forward of that
// many sequences is profiled as a graph runs it (attention workspace sized
// for `graph_context` tokens per sequence), and its activation peak plus
// the graphs' shared logits buffer is set aside (the graphs' memory pool
// is apart from the eager steps'). An error with the numbers when nothing
// is left.
StatusOr<std::int64_t> DeviceKvBudget(const DecoderModel& model, std::int64_t profile_tokens, std::int64_t block_size,
                                      double utilization, std::int64_t graph_seqs = 0, std::int64_t graph_context = 0);

// The KV cache `options` (resolved) give `model`: kv_cache_memory of the
// host's memory, or of the device's budget (DeviceKvBudget) on CUDA,
// capped at max_num_seqs sequences of max_model_len (SizeKvCacheForEngine).
StatusOr<KvCacheSize> SizeDecoderKvCache(const DecoderModel& model, const service::EngineOptions& options);

// Diagnostics the benchmarks set; serve never does.
struct RunnerDiagnostics {
  SamplerPlacement sampling = SamplerPlacement::kAuto;  // RunnerOptions::sampling
  bool time_phases = false;                             // RunnerOptions::time_phases
};

struct DecoderWorker {
  // What the engine steps: the runner, behind the fault injector when
  // options.inject_faults_every is set. Holds `runner`.
  std::unique_ptr<ModelExecutor> executor;
  ModelRunner* runner = nullptr;
  EngineConfig engine;     // scheduler, blocks, block size, EOS ids, hasher, events, host tier
  KvCacheSize kv;          // the cache the runner allocated
  KvCacheSize kv_offload;  // the host tier (num_blocks 0: none)
  // How the steps run, for the start-up log: "eager", or the CUDA graphs
  // captured (or why none could be).
  std::string execution = "eager";
};

// The runner over a cache of `kv` (SizeDecoderKvCache's, or the same size
// again for another run of the same workload) and the engine's config, from
// `options` (resolved). The model must outlive the worker.
StatusOr<DecoderWorker> BuildDecoderWorker(const DecoderModel& model, const service::EngineOptions& options,
                                           const KvCacheSize& kv, RunnerDiagnostics diagnostics = {});

}  // namespace ropeserve
