// The CPU kernels' run-time configuration, in one struct read once.
//
// Set at start-up by main() from its flags (--kernel-*, server/main.cc),
// whose defaults are the environment's ROPESERVE_KERNEL_* values; processes
// that never call SetKernelConfig (the test binaries) read the environment
// on the first kernel call. One convention for switches: 1 / on / true,
// 0 / off / false.
//
//   ROPESERVE_KERNEL_ISA=auto|amx|avx512|avx2|neon|generic
//                                    the instruction set whose kernel
//                                    variants run (kernels/cpu/cpu_features.h;
//                                    auto: the best this CPU runs; one it
//                                    cannot run is an error)
//   ROPESERVE_KERNEL_AVX512=0        the older switch: at most avx2 (1: auto)
//   ROPESERVE_KERNEL_POOL_SPIN_US=N  how long idle pool workers spin before
//                                    they sleep (0-1000000, default 200)
//   ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS=N|auto  up to how many rows int8
//                                    linears run the matrix-vector kernel
//                                    rather than the packed GEMM over
//                                    widened panels (0-65536; auto, the
//                                    default: where the two cross on the
//                                    ISA, kernel_table.h: 16 with VNNI,
//                                    every row count on AVX2)
//   ROPESERVE_KERNEL_AMX_MIN_ROWS=N   bf16 linears (and int8 / int4 ones on
//                                    the packed GEMM's path) of at least N
//                                    rows run on AMX tiles when the ISA is
//                                    amx (0-65536, default 32; 0: never)
//
// Torch-free. Thread-safety: SetKernelConfig before any kernel runs (the
// kernels read the configuration without a lock).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_features.h"

namespace ropeserve::cpu {

struct KernelConfig {
  std::optional<Isa> isa;  // nullopt: auto (BestIsa())
  std::int64_t pool_spin_us = 200;
  std::optional<std::int64_t> int8_vnni_max_rows;  // nullopt: auto (the ISA's crossover)
  std::int64_t amx_min_rows = 32;
};

inline constexpr std::int64_t kMaxPoolSpinUs = 1000000;
inline constexpr std::int64_t kMaxInt8VnniRows = 1 << 16;
inline constexpr std::int64_t kMaxAmxMinRows = 1 << 16;

// A switch's value: 1 / on / true, 0 / off / false; nullopt for anything
// else (flags and the environment share it).
std::optional<bool> ParseSwitch(std::string_view value);

// `value` of --kernel-isa / ROPESERVE_KERNEL_ISA ("auto" or an ISA name)
// applied to `config`; "" when it is valid and this CPU runs it, else why
// not (naming the ISAs this CPU runs).
std::string SetKernelIsa(KernelConfig& config, std::string_view value);
// The older --kernel-avx512 / ROPESERVE_KERNEL_AVX512 switch: off caps the
// ISA at avx2 (the best below AVX-512 this CPU runs); on changes nothing.
// "" when valid, else why not (off with an explicit avx512 or amx).
std::string ApplyAvx512Switch(KernelConfig& config, bool on);

// `value` of --kernel-int8-vnni-max-rows / its variable ("auto" or a row
// count up to kMaxInt8VnniRows) applied to `config`; "" when valid, else
// why not.
std::string SetInt8VnniMaxRows(KernelConfig& config, std::string_view value);

// The defaults overridden by the environment; nullopt with `error` naming
// the variable when one is set to something invalid.
std::optional<KernelConfig> KernelConfigFromEnvironment(std::string& error);

// The process's configuration: the one set, else the environment's (an
// invalid environment aborts with its error: only tests get here unchecked).
const KernelConfig& GetKernelConfig();
void SetKernelConfig(const KernelConfig& config);

}  // namespace ropeserve::cpu
