// Run-time choices shared by the CPU kernels: which AVX-512 extensions the
// CPU has (ROPESERVE_DISABLE_AVX512=1 answers no, for comparisons), and
// row-count switches read from the environment.
#pragma once

#include <cstdint>

namespace ropeserve::cpu {

// avx512f + avx512bw + avx512vl and the named extension ("avx512bf16",
// "avx512vnni"), as __builtin_cpu_supports spells it.
bool CpuHasAvx512(const char* extension);

// The environment variable `name` as an integer in [0, max], else `fallback`.
int64_t RowsFromEnv(const char* name, int64_t fallback, int64_t max);

}  // namespace ropeserve::cpu
