#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

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

bool CpuHasAvx512() {
  static const bool has = Avx512Base() && __builtin_cpu_supports("avx512dq");
  return has && GetKernelConfig().avx512;
}

bool CpuHasAvx512Vnni() {
  static const bool has = Avx512Base() && __builtin_cpu_supports("avx512vnni");
  return has && GetKernelConfig().avx512;
}

namespace {
// CPUID.(7,0):EDX bits 22 (AMX-BF16) and 24 (AMX-TILE); the OS saves tile
// state (XCR0 bits 17, 18, read with xgetbv once CPUID.1:ECX.OSXSAVE says
// it may be); then Linux's per-process permission for tile data
// (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18), without which the first
// tile instruction faults.
bool AmxUsable() {
  if (!Avx512Base() || !__builtin_cpu_supports("avx512bf16")) return false;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
}  // namespace

bool CpuHasAmxBf16() {
  static const bool has = AmxUsable();
  return has && GetKernelConfig().avx512;
}

}  // namespace ropeserve::cpu
