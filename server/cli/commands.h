// Subcommands of the `ropeserve` executable. Each Add* registers a CLI11
// subcommand and returns the function that runs it once flags are parsed
// (main() sets global state such as threads first).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "server/checkpoint/dtype.h"
#include "server/common/status.h"
#include "server/common/token_id.h"
#include "server/engine/speculative.h"
#include "server/models/quantization.h"
#include "server/serving/compute_dtype.h"

namespace ropeserve::cli {

using Runner = std::function<int()>;

Runner AddGenerate(CLI::App& app);
Runner AddMakeModel(CLI::App& app);
Runner AddBench(CLI::App& app);
Runner AddBenchQa(CLI::App& app);
Runner AddTokenize(CLI::App& app);
Runner AddChatTemplate(CLI::App& app);
Runner AddQa(CLI::App& app);
Runner AddEncode(CLI::App& app);
#ifdef ROPESERVE_HAVE_NETWORK
Runner AddServe(CLI::App& app);
Runner AddLoadgen(CLI::App& app);
#endif

inline const auto kDTypeChoices = {"auto", "float32", "f32", "bfloat16", "bf16", "float16", "f16"};
// --quantization (server/models/quantization.h).
inline const auto kQuantizationChoices = {"none", "int8", "int4", "int4-all"};
inline constexpr const char* kQuantizationHelp =
    "Weight quantization at load: none, int8 (per-channel int8 projections and LM head; half the bytes "
    "of bf16 for decode), or int4 (group-wise 4-bit projections, groups of 128 columns, int8 LM head; a "
    "quarter of bf16's bytes in the layers; docs/benchmarks.md), or int4-all (int4 with a 4-bit LM head "
    "too: fewer bytes per token for small models, 4-bit rounding in the logits). A GPTQ, AWQ or compressed-tensors "
    "checkpoint is served with its own 4-bit weights (none, int4 or int4-all; int8 is refused). int8 runs on the "
    "CPU only; with --device cuda, int4's LM head stays 16-bit";

// --speculative, --num-speculative-tokens, --prompt-lookup-min/max (serve,
// generate, bench): prompt-lookup speculative decoding (server/engine/
// speculative.h).
struct SpeculativeFlags {
  std::string method = "none";  // none | ngram
  int num_tokens = 4;
  int min_ngram = 2;
  int max_ngram = 4;
  int disable_by_batch_size = SpeculativeConfig().disable_by_batch_size;
};
void AddSpeculativeFlags(CLI::App* sub, SpeculativeFlags& f);
// The engine's config for the flags (num_tokens 0 when the method is none).
StatusOr<SpeculativeConfig> SpeculativeFrom(const SpeculativeFlags& f);

// in[key] of a JSON Lines input (`encode`, `tokenize --decode`): a list of
// integers from 0 to 2^31 - 1; errors name `key`.
StatusOr<std::vector<TokenId>> ReadJsonIdList(const nlohmann::json& in, const std::string& key);

// --device: cpu, cuda or cuda:N (N up to 3 digits).
inline constexpr const char* kDeviceHelp =
    "Worker device: cpu, or cuda / cuda:N in builds whose LibTorch has CUDA (see docs/gpu.md)";
CLI::Validator DeviceValidator();

// "1,15043, 7" -> {1, 15043, 7}; errors name `flag`.
StatusOr<std::vector<std::int64_t>> ParseIdList(const std::string& text, const std::string& flag);

// Prints "error: <message>" to stderr and returns exit code 1.
int Fail(const std::string& message);

}  // namespace ropeserve::cli
