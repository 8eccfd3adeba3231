// `ropeserve bench` (bench/offline_bench.h) and `ropeserve bench-qa`
// (bench/qa_bench.h).
#include <memory>

#include "bench/offline_bench.h"
#include "bench/qa_bench.h"
#include "server/cli/commands.h"

namespace ropeserve::cli {

Runner AddBench(CLI::App& app) {
  auto o = std::make_shared<bench::BenchOptions>();
  auto dtype = std::make_shared<std::string>("bfloat16");
  auto baseline = std::make_shared<std::string>();
  auto quantization = std::make_shared<std::string>("none");
  auto speculative = std::make_shared<SpeculativeFlags>();
  CLI::App* sub = app.add_subcommand("bench", "Offline throughput benchmark of the batching engine (no network)");
  sub->add_option("--model", o->model, "Checkpoint directory")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--device", o->device, kDeviceHelp)->capture_default_str()->check(DeviceValidator());
  sub->add_option("--num-requests", o->num_requests)->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub->add_option("--concurrency", o->concurrency, "Requests kept in flight")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub->add_option("--input-len", o->input_len, "Prompt lengths: N, uniform:A:B or sharegpt")->capture_default_str();
  sub->add_option("--output-len", o->output_len, "Output lengths: N, uniform:A:B or sharegpt")->capture_default_str();
  sub->add_option("--seed", o->seed)->capture_default_str();
  sub->add_option("--dtype", *dtype)
      ->capture_default_str()
      ->check(CLI::IsMember({"float32", "f32", "bfloat16", "bf16"}));
  sub->add_option("--quantization", *quantization,
                  std::string(kQuantizationHelp) +
                      "; int8 also reports the logits' relative error against the "
                      "unquantized model")
      ->capture_default_str()
      ->check(CLI::IsMember(kQuantizationChoices));
  sub->add_option("--baseline", *baseline, "Also run a static-batching baseline")->check(CLI::IsMember({"static"}));
  sub->add_flag("--check-invariance", o->check_invariance, "Rerun every request alone; count differing outputs");
  sub->add_flag("--json", o->json, "Print one JSON object");
  sub->add_option("--block-size", o->block_size)->capture_default_str()->check(CLI::Range(1, 1024));
  sub->add_option("--kv-cache-memory", o->kv_cache_memory, "As serve's")->capture_default_str();
  sub->add_flag("--enforce-eager", o->enforce_eager, "As serve's (CUDA only): no CUDA graphs");
  sub->add_option("--gpu-memory-utilization", o->gpu_memory_utilization, "As serve's (CUDA only)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  sub->add_option("--max-num-batched-tokens", o->max_num_batched_tokens)->capture_default_str();
  sub->add_option("--max-prefill-tokens-while-decoding", o->max_prefill_tokens_while_decoding,
                  "As serve's: most prompt tokens in a step that also decodes (0 = no cap)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 24));
  sub->add_option("--max-model-len", o->max_model_len, "Default: min(model's, 4096)");
  sub->add_option("--batch1-tokens", o->batch1_tokens,
                  "Also decode this many tokens for one request and report tokens/s against the memory-bandwidth "
                  "limit, then up to 64 again with the step's phases timed (batch1.step_ms; 0 = skip)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  sub->add_option("--prefill-tokens", o->prefill_tokens,
                  "Also prefill one prompt of this many tokens alone and report prompt tokens/s (llama-bench's "
                  "pp512 is 512; 0 = skip)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  sub->add_option(
         "--profile-steps", o->profile_steps,
         "CUDA: also profile this many batch-1 decode steps (LibTorch's Kineto profiler) and report the device "
         "kernels per step and the ten that take the most time (batch1.kernels; 0 = skip)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  sub->add_option("--json-schema", o->json_schema,
                  "A JSON Schema file: also run the requests constrained to it (structured output, EOS allowed) and "
                  "free, twice each, interleaved; report both, the overhead and the schema's compile time")
      ->check(CLI::ExistingFile);
  AddSpeculativeFlags(sub, *speculative);
  sub->add_option("--document", o->document,
                  "A text file: prompts are windows of it (the model's tokenizer.json) instead of random ids")
      ->check(CLI::ExistingFile);
  sub->add_flag("--spec-verify-cost", o->spec_verify_cost,
                "Also time decode steps verifying 2 / 4 / 8 proposals against plain ones at each batch size (256 "
                "cached tokens) and report the speed-up that cost gives at acceptance rates 0.3 / 0.5 / 0.7");
  sub->add_option("--spec-verify-batches", o->spec_verify_batches, "The batch sizes --spec-verify-cost measures")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  auto sampler = std::make_shared<std::string>("auto");
  sub->add_option("--sampler", *sampler,
                  "Where logits rows are processed and drawn: auto (the device's sampler on CUDA, the host "
                  "sampler on the CPU), host, or device (on the CPU: the device sampler's tensor code, greedy "
                  "rows only). On any placement a step whose rows have nothing to process or report takes "
                  "each row's argmax from the rows' summary (--presence-penalty gives every row an edit)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "host", "device"}));
  sub->add_option("--presence-penalty", o->presence_penalty,
                  "Every request's presence penalty (greedy decoding with a processed row)")
      ->capture_default_str()
      ->check(CLI::Range(-2.0, 2.0));
  sub->add_option("--workload-out", o->workload_out,
                  "Also write the requests (prompt ids, output lengths) to this JSON file, for another "
                  "implementation to run the same ones");
  return [o, dtype, baseline, quantization, speculative, sampler] {
    o->sampler = *sampler == "host"     ? SamplerPlacement::kHost
                 : *sampler == "device" ? SamplerPlacement::kDevice
                                        : SamplerPlacement::kAuto;
    auto spec = SpeculativeFrom(*speculative);
    if (!spec.ok()) return Fail(spec.status().message());
    o->speculative = *spec;
    o->dtype = ParseDTypeFlag(*dtype).value_or(DType::kBF16);
    o->quantization = ParseQuantization(*quantization).value_or(Quantization::kNone);
    o->baseline_static = *baseline == "static";
    Status s = bench::RunBench(*o);
    return s.ok() ? 0 : Fail(s.ToString());
  };
}

Runner AddBenchQa(CLI::App& app) {
  auto o = std::make_shared<bench::QaBenchOptions>();
  CLI::App* sub = app.add_subcommand(
      "bench-qa",
      "Offline extractive-QA benchmark: packed windows (service::QaService) vs one window per forward, sequential");
  sub->add_option("--model", o->model, "Span model directory")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--context-chars", o->context_chars, "Context lengths in characters")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 22));
  sub->add_option("--concurrency", o->concurrency, "Client concurrencies")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  sub->add_option("--requests", o->requests, "Requests per cell (0 = max(4, concurrency))")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  sub->add_option("--max-seq-len", o->max_seq_len)->capture_default_str()->check(CLI::Range(8, 1 << 20));
  sub->add_option("--doc-stride", o->doc_stride)->capture_default_str()->check(CLI::Range(0, 1 << 20));
  sub->add_option("--max-batch-tokens", o->max_batch_tokens, "Tokens per packed forward (the engine's step budget)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24));
  sub->add_option("--seed", o->seed)->capture_default_str();
  auto qa_dtype = std::make_shared<std::string>("float32");
  sub->add_option("--dtype", *qa_dtype, "Compute dtype of the span model")
      ->capture_default_str()
      ->check(CLI::IsMember({"float32", "f32", "bfloat16", "bf16"}));
  sub->add_flag("--json", o->json, "Print one JSON object");
  return [o, qa_dtype] {
    o->dtype = ParseDTypeFlag(*qa_dtype).value_or(DType::kF32);
    if (o->doc_stride >= o->max_seq_len) return Fail("--doc-stride must be below --max-seq-len");
    Status s = bench::RunQaBench(*o);
    return s.ok() ? 0 : Fail(s.ToString());
  };
}

}  // namespace ropeserve::cli
