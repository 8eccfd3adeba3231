#include "kernels/cpu/cpu_features.h"

#include <fstream>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "kernels/cpu/kernel_config.h"

namespace ropeserve::cpu {

namespace {

#if defined(__x86_64__)
// CPUID.(7,0):EDX bits 22 (AMX-BF16) and 24 (AMX-TILE); the OS saves tile
// state (XCR0 bits 17, 18, read with xgetbv once CPUID.1:ECX.OSXSAVE says
// it may be); then Linux's per-process permission for tile data
// (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18), without which the first
// tile instruction faults.
bool AmxUsable() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#endif

CpuFeatures Detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  // (__builtin_cpu_supports takes string literals only; it also checks
  // that the OS saves the AVX and AVX-512 register state.)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
  f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
  f.amx = f.avx512_bf16 && AmxUsable();
#elif defined(__aarch64__)
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  f.neon = (hw & HWCAP_ASIMD) != 0;
  f.neon_dotprod = (hw & HWCAP_ASIMDDP) != 0;
#ifdef HWCAP2_BF16
  f.neon_bf16 = (hw2 & HWCAP2_BF16) != 0;
#else
  (void)hw2;
#endif
#endif
  return f;
}

}  // namespace

const CpuFeatures& DetectedCpu() {
  static const CpuFeatures f = Detect();
  return f;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kGeneric:
      return "generic";
    case Isa::kNeon:
      return "neon";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAmx:
      return "amx";
  }
  return "?";
}

std::optional<Isa> ParseIsa(std::string_view name) {
  for (Isa isa : {Isa::kGeneric, Isa::kNeon, Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    if (name == IsaName(isa)) return isa;
  return std::nullopt;
}

bool CpuCanRun(Isa isa) {
  const CpuFeatures& f = DetectedCpu();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case Isa::kGeneric:
      return true;
    case Isa::kNeon:
      return f.neon;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvx512:
      return avx2 && f.avx512;
    case Isa::kAmx:
      return avx2 && f.amx;
  }
  return false;
}

std::vector<Isa> RunnableIsas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kGeneric, Isa::kNeon, Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    if (CpuCanRun(isa)) out.push_back(isa);
  return out;
}

Isa BestIsa() { return RunnableIsas().back(); }

Isa ActiveIsa() {
  const std::optional<Isa>& chosen = GetKernelConfig().isa;
  return chosen ? *chosen : BestIsa();
}

std::string CpuModelName() {
#if defined(__x86_64__)
  unsigned regs[12] = {};
  unsigned max = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000, &max, &b, &c, &d) && max >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i)
      __get_cpuid(0x80000002 + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
    std::string name(reinterpret_cast<const char*>(regs), sizeof(regs));
    name = name.substr(0, name.find('\0'));
    const auto first = name.find_first_not_of(' '), last = name.find_last_not_of(' ');
    if (first != std::string::npos) return name.substr(first, last - first + 1);
  }
#endif
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    for (const char* key : {"model name", "Model", "CPU part"})
      if (line.rfind(key, 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string CpuExtensions() {
  const CpuFeatures& f = DetectedCpu();
  std::string out;
  auto add = [&](bool has, const char* name) {
    if (!has) return;
    if (!out.empty()) out += ' ';
    out += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512, "avx512f avx512bw avx512vl avx512dq");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.amx, "amx_bf16 amx_tile");
  add(f.neon, "asimd");
  add(f.neon_dotprod, "asimddp");
  add(f.neon_bf16, "bf16");
  return out.empty() ? "none" : out;
}

bool CpuHasAvx512() { return ActiveIsa() >= Isa::kAvx512 && DetectedCpu().avx512; }
bool CpuHasAvx512Bf16() { return CpuHasAvx512() && DetectedCpu().avx512_bf16; }
bool CpuHasAvx512Vnni() { return CpuHasAvx512() && DetectedCpu().avx512_vnni; }
bool CpuHasAmxBf16() { return ActiveIsa() >= Isa::kAmx && DetectedCpu().amx; }

}  // namespace ropeserve::cpu
