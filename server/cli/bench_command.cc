// `ropeserve bench`: see bench/offline_bench.h.
#include <memory>

#include "bench/offline_bench.h"
#include "server/cli/commands.h"

namespace ropeserve::cli {

Runner AddBench(CLI::App& app) {
  auto o = std::make_shared<bench::BenchOptions>();
  auto dtype = std::make_shared<std::string>("bfloat16");
  auto baseline = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("bench", "Offline throughput benchmark of the batching engine (no network)");
  sub->add_option("--model", o->model, "Checkpoint directory")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--num-requests", o->num_requests)->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub->add_option("--concurrency", o->concurrency, "Requests kept in flight")->capture_default_str()->check(CLI::Range(1, 4096));
  sub->add_option("--input-len", o->input_len, "Prompt lengths: N, uniform:A:B or sharegpt")->capture_default_str();
  sub->add_option("--output-len", o->output_len, "Output lengths: N, uniform:A:B or sharegpt")->capture_default_str();
  sub->add_option("--seed", o->seed)->capture_default_str();
  sub->add_option("--dtype", *dtype)->capture_default_str()->check(CLI::IsMember({"float32", "f32", "bfloat16", "bf16"}));
  sub->add_option("--baseline", *baseline, "Also run a static-batching baseline")->check(CLI::IsMember({"static"}));
  sub->add_flag("--check-invariance", o->check_invariance, "Rerun every request alone; count differing outputs");
  sub->add_flag("--json", o->json, "Print one JSON object");
  sub->add_option("--block-size", o->block_size)->capture_default_str()->check(CLI::Range(1, 1024));
  sub->add_option("--kv-cache-memory", o->kv_cache_memory)->capture_default_str();
  sub->add_option("--max-num-batched-tokens", o->max_num_batched_tokens)->capture_default_str();
  sub->add_option("--max-model-len", o->max_model_len, "Default: min(model's, 4096)");
  sub->add_option("--batch1-tokens", o->batch1_tokens,
                  "Also decode this many tokens for one request and report tokens/s against the memory-bandwidth "
                  "limit (0 = skip)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  return [o, dtype, baseline] {
    o->dtype = ParseDTypeFlag(*dtype).value_or(DType::kBF16);
    o->baseline_static = *baseline == "static";
    Status s = bench::RunBench(*o);
    return s.ok() ? 0 : Fail(s.ToString());
  };
}

}  // namespace ropeserve::cli
