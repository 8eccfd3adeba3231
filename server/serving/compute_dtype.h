// The compute dtype a --dtype flag names, for serve, generate and bench.
#pragma once

#include <optional>
#include <string>

#include "server/checkpoint/dtype.h"

namespace ropeserve {

// Parses "float32|f32|bfloat16|bf16|float16|f16"; nullopt for "auto" (and
// anything else: the CLI's choices refuse other values first).
std::optional<DType> ParseDTypeFlag(const std::string& s);

// The compute dtype for --dtype: "auto" means bfloat16 for checkpoints
// stored in bfloat16 and float32 otherwise; on the CPU (`cpu`) bfloat16
// only where the active ISA has a vector bf16 GEMM (logged when not).
DType ResolveComputeDType(const std::string& flag, const std::string& model_dir, bool cpu);

}  // namespace ropeserve
