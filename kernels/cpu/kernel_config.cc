#include "kernels/cpu/kernel_config.h"

#include <cstdio>
#include <cstdlib>

namespace ropeserve::cpu {
namespace {

// The configuration readers: the only getenv calls of kernels/.
bool ReadSwitch(const char* name, std::optional<bool>& out, std::string& error) {
  const char* v = std::getenv(name);
  if (v == nullptr) return true;
  out = ParseSwitch(v);
  if (!out) {
    error = std::string(name) + "=" + v + ": expected 1/on/true or 0/off/false";
    return false;
  }
  return true;
}

// A decimal integer in [0, max], the whole of `v`.
bool ParseCount(const char* v, std::int64_t max, std::int64_t& out) {
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || n < 0 || n > max) return false;
  out = static_cast<std::int64_t>(n);
  return true;
}

bool ReadCount(const char* name, std::int64_t max, std::int64_t& out, std::string& error) {
  const char* v = std::getenv(name);
  if (v == nullptr) return true;
  if (!ParseCount(v, max, out)) {
    error = std::string(name) + "=" + v + ": expected an integer from 0 to " + std::to_string(max);
    return false;
  }
  return true;
}

struct Holder {
  KernelConfig config;
  Holder() {
    std::string error;
    auto c = KernelConfigFromEnvironment(error);
    if (!c) {
      std::fprintf(stderr, "error: %s\n", error.c_str());
      std::abort();
    }
    config = *c;
  }
};

Holder& TheConfig() {
  static Holder holder;
  return holder;
}

std::string Runnable() {
  std::string out;
  for (Isa isa : RunnableIsas()) out += std::string(out.empty() ? "" : ", ") + IsaName(isa);
  return out;
}

}  // namespace

std::optional<bool> ParseSwitch(std::string_view v) {
  if (v == "1" || v == "on" || v == "true") return true;
  if (v == "0" || v == "off" || v == "false") return false;
  return std::nullopt;
}

std::string SetKernelIsa(KernelConfig& config, std::string_view value) {
  if (value == "auto") {
    config.isa.reset();
    return "";
  }
  const std::optional<Isa> isa = ParseIsa(value);
  if (!isa) return "expected auto, amx, avx512, avx2, neon or generic";
  if (!CpuCanRun(*isa))
    return std::string("this CPU (") + CpuModelName() + ") cannot run " + IsaName(*isa) + " kernels; it runs " +
           Runnable();
  config.isa = isa;
  return "";
}

std::string ApplyAvx512Switch(KernelConfig& config, bool on) {
  if (on) return "";
  if (config.isa && *config.isa >= Isa::kAvx512)
    return std::string("AVX-512 off contradicts the ISA ") + IsaName(*config.isa);
  if (!config.isa) config.isa = CpuCanRun(Isa::kAvx2) ? std::min(BestIsa(), Isa::kAvx2) : BestIsa();
  return "";
}

std::string SetInt8VnniMaxRows(KernelConfig& config, std::string_view value) {
  if (value == "auto") {
    config.int8_vnni_max_rows.reset();
    return "";
  }
  std::int64_t n = 0;
  const std::string text(value);
  if (!ParseCount(text.c_str(), kMaxInt8VnniRows, n))
    return "expected auto or an integer from 0 to " + std::to_string(kMaxInt8VnniRows);
  config.int8_vnni_max_rows = n;
  return "";
}

std::optional<KernelConfig> KernelConfigFromEnvironment(std::string& error) {
  KernelConfig c;
  std::optional<bool> avx512;
  if (!ReadSwitch("ROPESERVE_KERNEL_AVX512", avx512, error) ||
      !ReadCount("ROPESERVE_KERNEL_POOL_SPIN_US", kMaxPoolSpinUs, c.pool_spin_us, error) ||
      !ReadCount("ROPESERVE_KERNEL_AMX_MIN_ROWS", kMaxAmxMinRows, c.amx_min_rows, error))
    return std::nullopt;
  if (const char* rows = std::getenv("ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS"); rows != nullptr) {
    if (std::string why = SetInt8VnniMaxRows(c, rows); !why.empty()) {
      error = std::string("ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS=") + rows + ": " + why;
      return std::nullopt;
    }
  }
  if (const char* isa = std::getenv("ROPESERVE_KERNEL_ISA"); isa != nullptr) {
    if (std::string why = SetKernelIsa(c, isa); !why.empty()) {
      error = std::string("ROPESERVE_KERNEL_ISA=") + isa + ": " + why;
      return std::nullopt;
    }
  }
  if (avx512) {
    if (std::string why = ApplyAvx512Switch(c, *avx512); !why.empty()) {
      error = "ROPESERVE_KERNEL_AVX512=0: " + why;
      return std::nullopt;
    }
  }
  return c;
}

const KernelConfig& GetKernelConfig() { return TheConfig().config; }

void SetKernelConfig(const KernelConfig& config) { TheConfig().config = config; }

}  // namespace ropeserve::cpu
