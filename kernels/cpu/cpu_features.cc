#include "kernels/cpu/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace ropeserve::cpu {

namespace {
// The common part of both checks (ROPESERVE_DISABLE_AVX512=1 answers no).
bool Avx512Base() {
  const char* off = std::getenv("ROPESERVE_DISABLE_AVX512");
  if (off != nullptr && off[0] == '1') return false;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}
}  // namespace

// (__builtin_cpu_supports takes string literals only.)
bool CpuHasAvx512Bf16() {
  static const bool ok = Avx512Base() && __builtin_cpu_supports("avx512bf16");
  return ok;
}

bool CpuHasAvx512Vnni() {
  static const bool ok = Avx512Base() && __builtin_cpu_supports("avx512vnni");
  return ok;
}

int64_t RowsFromEnv(const char* name, int64_t fallback, int64_t max) {
  const char* v = std::getenv(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return end != v && *end == '\0' && n >= 0 && n <= max ? static_cast<int64_t>(n) : fallback;
}

bool EnabledInEnv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace ropeserve::cpu
