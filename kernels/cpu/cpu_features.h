// Run-time choices shared by the CPU kernels: which AVX-512 extensions the
// CPU has (ROPESERVE_DISABLE_AVX512=1 answers no, for comparisons), and
// row-count switches read from the environment.
#pragma once

#include <cstdint>

namespace ropeserve::cpu {

// avx512f + avx512bw + avx512vl and avx512_bf16 / avx512_vnni; checked
// once per process (the kernels ask on every call).
bool CpuHasAvx512Bf16();
bool CpuHasAvx512Vnni();

// The environment variable `name` as an integer in [0, max], else `fallback`.
int64_t RowsFromEnv(const char* name, int64_t fallback, int64_t max);
// A fast path's off switch: false when the environment variable `name` is
// "0", true otherwise (unset included). Callers read it once.
bool EnabledInEnv(const char* name);

}  // namespace ropeserve::cpu
