// The instruction sets the CPU kernels are written for, what this CPU can
// run, and which one the kernels use: chosen once per process from the
// kernel configuration (kernels/cpu/kernel_config.h: --kernel-isa, auto by
// default: the best one this CPU runs), logged at start-up and reported by
// /v1/info. Each kernel family has a variant per ISA where one pays, and a
// scalar generic variant that is the reference of the others
// (kernels/cpu/kernel_table.h). Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ropeserve::cpu {

// Ordered by what each adds on its architecture: on x86-64 generic < avx2
// (AVX2 + FMA + F16C) < avx512 (F, BW, VL, DQ) < amx (AMX-TILE + AMX-BF16
// granted to the process); on aarch64 generic < neon (Advanced SIMD).
enum class Isa : int { kGeneric = 0, kNeon = 1, kAvx2 = 2, kAvx512 = 3, kAmx = 4 };

const char* IsaName(Isa isa);
// "generic", "neon", "avx2", "avx512", "amx"; nullopt for anything else.
std::optional<Isa> ParseIsa(std::string_view name);

// Whether this CPU (and its OS, and for AMX this process's permission)
// can execute the ISA's kernels.
bool CpuCanRun(Isa isa);
// The best ISA this CPU runs, and all of them (ascending).
Isa BestIsa();
std::vector<Isa> RunnableIsas();
// The ISA the kernels use: the kernel configuration's, BestIsa() for auto.
Isa ActiveIsa();

// What the CPU has (asked once per process), whatever ISA is active: the
// kernel tables read it to pick the variants of an ISA's extensions.
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512 = false;  // F, BW, VL and DQ
  bool avx512_bf16 = false, avx512_vnni = false, amx = false;
  bool neon = false, neon_dotprod = false, neon_bf16 = false;
};
const CpuFeatures& DetectedCpu();

// The CPU's model name (its CPUID brand string, or /proc/cpuinfo's), and
// its extensions that the kernels look at, space-separated ("avx2 fma f16c
// avx512f ... avx512_bf16 avx512_vnni"; "asimd asimddp bf16" on aarch64).
std::string CpuModelName();
std::string CpuExtensions();

// Extensions inside the active ISA that single variants need (false when
// the active ISA is below avx512 / amx, so that forcing an ISA reaches
// every kernel):
// avx512f + avx512bw + avx512vl + avx512dq.
bool CpuHasAvx512();
// ... and avx512_bf16.
bool CpuHasAvx512Bf16();
// ... and avx512_vnni.
bool CpuHasAvx512Vnni();
// AMX-TILE + AMX-BF16 (and avx512_bf16) usable by this process; whether a
// linear uses the tiles: PackedLinearUsesAmx (packed_linear.h).
bool CpuHasAmxBf16();

}  // namespace ropeserve::cpu
