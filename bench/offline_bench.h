// `ropeserve bench`: offline throughput harness (no network). Drives the
// engine with a seeded synthetic workload at a fixed client concurrency and,
// optionally, a static-batching baseline on the same requests in the same
// process (Hugging Face `generate` style: batches padded to the longest
// prompt that run until their longest member ends).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/checkpoint/dtype.h"
#include "server/common/status.h"
#include "server/engine/scheduler.h"
#include "server/models/quantization.h"
#include "server/runner/model_runner.h"

namespace ropeserve::bench {

struct BenchOptions {
  std::string model;
  // cpu, cuda or cuda:N (a CUDA build; the KV cache's fraction is then of
  // the device's free memory, the batch-1 roofline of its read bandwidth).
  std::string device = "cpu";
  int num_requests = 64;
  int concurrency = 8;
  std::string input_len = "sharegpt";   // N | uniform:A:B | sharegpt
  std::string output_len = "sharegpt";  // N | uniform:A:B | sharegpt
  std::uint64_t seed = 0;
  DType dtype = DType::kBF16;
  // int8: the run uses int8 weights, and the report adds the logits'
  // relative error against the same checkpoint unquantized (same dtype).
  Quantization quantization = Quantization::kNone;
  bool baseline_static = false;
  bool check_invariance = false;
  bool json = false;
  int block_size = 16;
  std::string kv_cache_memory = "auto";  // as serve's
  double gpu_memory_utilization = 0.9;   // as serve's (CUDA only)
  bool enforce_eager = false;            // no CUDA graphs (CUDA only; as serve's)
  // Where the rows are processed and drawn (RunnerOptions::sampling): to
  // measure the host sampler against DeviceSampling on the same device.
  SamplerPlacement sampler = SamplerPlacement::kAuto;
  // Every request's presence penalty (0 = none): greedy decoding with a
  // penalty, so that each row is processed before its argmax.
  double presence_penalty = 0;
  std::int64_t max_num_batched_tokens = 2048;
  std::int64_t max_prefill_tokens_while_decoding = SchedulerConfig().max_prefill_tokens_while_decoding;
  std::int64_t max_model_len = 0;  // 0 = min(model's, 4096)
  // Batch-1 decode measured in the same run and compared with the memory
  // bandwidth limit (weights read per token / measured read bandwidth).
  // 0 = skip.
  int batch1_tokens = 64;
  // One prompt of this many tokens alone (one output token): prompt
  // tokens/s, like llama-bench's pp512. 0 = skip.
  int prefill_tokens = 0;
  // Device kernels per batch-1 decode step over this many steps (LibTorch's
  // profiler; bench/kernel_profile.h): the most expensive and the count per
  // step. CUDA only; 0 = skip.
  int profile_steps = 0;
  // A JSON Schema file: the same requests run again, constrained to it
  // (server/structured/; needs the model's tokenizer.json) and free, twice
  // each, interleaved: the overhead compares those pairs.
  std::string json_schema;
  // Also write the workload (prompt ids, output lengths) to this JSON file
  // before running, for another implementation to run the same requests
  // (tests/gpu/hf_generate_bench.py).
  std::string workload_out;
  // A text file: prompts are windows of it (tokenized with the model's
  // tokenizer.json) instead of random ids: a summarization-shaped input.
  std::string document;
  // Prompt-lookup speculative decoding in the engine runs (serve's flags);
  // the report adds its proposals and acceptance.
  SpeculativeConfig speculative;
  // Also measure the cost of verifying 2 / 4 / 8 proposals against one
  // decode step (bench/spec_bench.h).
  bool spec_verify_cost = false;
  std::vector<int> spec_verify_batches = {1, 16};  // the batch sizes it measures
};

// Runs the benchmark and prints a report (text or one JSON object) to stdout.
Status RunBench(const BenchOptions& options);

}  // namespace ropeserve::bench
