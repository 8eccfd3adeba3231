#include "kernels/cpu/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace ropeserve::cpu {

bool CpuHasAvx512(const char* extension) {
  const char* off = std::getenv("ROPESERVE_DISABLE_AVX512");
  if (off != nullptr && off[0] == '1') return false;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl"))
    return false;
  // __builtin_cpu_supports takes string literals only.
  if (std::strcmp(extension, "avx512bf16") == 0) return __builtin_cpu_supports("avx512bf16");
  if (std::strcmp(extension, "avx512vnni") == 0) return __builtin_cpu_supports("avx512vnni");
  return false;
}

int64_t RowsFromEnv(const char* name, int64_t fallback, int64_t max) {
  const char* v = std::getenv(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return end != v && *end == '\0' && n >= 0 && n <= max ? static_cast<int64_t>(n) : fallback;
}

}  // namespace ropeserve::cpu
