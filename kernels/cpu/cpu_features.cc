#include "kernels/cpu/cpu_features.h"

#include "kernels/cpu/kernel_config.h"

namespace ropeserve::cpu {

namespace {
// The common part of both checks.
bool Avx512Base() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}
}  // namespace

// (__builtin_cpu_supports takes string literals only.)
bool CpuHasAvx512Bf16() {
  static const bool has = Avx512Base() && __builtin_cpu_supports("avx512bf16");
  return has && GetKernelConfig().avx512;
}

bool CpuHasAvx512Vnni() {
  static const bool has = Avx512Base() && __builtin_cpu_supports("avx512vnni");
  return has && GetKernelConfig().avx512;
}

}  // namespace ropeserve::cpu
