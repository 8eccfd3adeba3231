// The kernel tables (kernel_table.h). The per-ISA cores are declared here,
// their one meeting place: each *_generic.cc, *_avx2.cc, *_avx512.cc,
// *_amx.cc (and *_neon.cc) file defines its namespace's functions with the
// signatures below.
#include "kernels/cpu/kernel_table.h"

#include <array>
#include <vector>

#include "kernels/cpu/fused_ops_core.h"

namespace ropeserve::cpu {

#define ROPESERVE_LINEAR_CORES(isa)                                                                                    \
  namespace isa {                                                                                                      \
  void PackedLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint16_t* packed,         \
                          const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin,                 \
                          std::int64_t p_end);                                                                         \
  void QuantizeRowsInt16(const void* x, bool bf16, std::int64_t M, std::int64_t K, std::int64_t Kp, int levels,        \
                         std::int16_t* xq, float* scales);                                                             \
  void Int8LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp, const std::int8_t* w, \
                       const float* ws, std::int64_t K, const float* bias, void* out, bool out_bf16, std::int64_t N,   \
                       std::int64_t n_begin, std::int64_t n_end);                                                      \
  void DequantizeRows(const std::int8_t* q, const float* scale, std::int64_t K, void* out, bool out_bf16,              \
                      std::int64_t n_begin, std::int64_t n_end);                                                       \
  void Int4LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp,                       \
                       const std::uint8_t* packed, const float* scale, const std::uint16_t* scale16,                   \
                       const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias,           \
                       void* out, bool out_bf16, std::int64_t N, std::int64_t n_begin, std::int64_t n_end);            \
  void SummarizeRow(const float* x, std::int64_t n, float* lse, float* max, std::int64_t* argmax);                     \
  void PackedLinearF32Panels(const float* x, std::int64_t M, std::int64_t K, const float* packed, const float* bias,   \
                             float* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end);                    \
  }

ROPESERVE_LINEAR_CORES(generic)
#if defined(__x86_64__)
ROPESERVE_LINEAR_CORES(avx2)
ROPESERVE_LINEAR_CORES(avx512)
#endif
#undef ROPESERVE_LINEAR_CORES

// The int4 kernel's int8-x form (kernel_table.h: int4_int8_x).
#define ROPESERVE_INT4_INT8_X_CORES(isa)                                                                          \
  namespace isa {                                                                                                 \
  void QuantizeGroupsInt8(const void* x, bool bf16, std::int64_t M, std::int64_t K, std::int64_t Kp,              \
                          std::int64_t group_size, std::int8_t* xq, float* scales, std::int32_t* sums);           \
  void Int4LinearRangeInt8X(const std::int8_t* xq, const float* xs, const std::int32_t* xsum, std::int64_t M,     \
                            std::int64_t Kp, const std::uint8_t* packed, const float* scale,                      \
                            const std::uint16_t* scale16, const std::uint8_t* zero, std::int64_t K,               \
                            std::int64_t group_size, const float* bias, void* out, bool out_bf16, std::int64_t N, \
                            std::int64_t n_begin, std::int64_t n_end);                                            \
  }
ROPESERVE_INT4_INT8_X_CORES(generic)
#if defined(__x86_64__)
ROPESERVE_INT4_INT8_X_CORES(avx2)
#endif
#undef ROPESERVE_INT4_INT8_X_CORES

// The panel paths with no scratch argument (generic, avx2: they keep their
// own); AVX-512 and AMX take a widened bf16 panel (ceil(K / 2) * 128
// values) from the caller.
namespace generic {
void Int8PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::int8_t* q,
                           const float* scale, const float* bias, std::uint16_t* out, std::int64_t N,
                           std::int64_t p_begin, std::int64_t p_end);
void Int4PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint8_t* packed,
                           const float* scale, const std::uint8_t* zero, std::int64_t group, const float* bias,
                           std::uint16_t* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end);
}  // namespace generic
#if defined(__x86_64__)
namespace avx2 {
void PackedLinearPanelsFloatX(const float* xf, std::int64_t M, std::int64_t K, const std::uint16_t* packed,
                              const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin,
                              std::int64_t p_end);
void Int8PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::int8_t* q,
                           const float* scale, const float* bias, std::uint16_t* out, std::int64_t N,
                           std::int64_t p_begin, std::int64_t p_end);
void Int4PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint8_t* packed,
                           const float* scale, const std::uint8_t* zero, std::int64_t group, const float* bias,
                           std::uint16_t* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end);
}  // namespace avx2
#define ROPESERVE_PANEL_CORES(isa)                                                                                \
  namespace isa {                                                                                                 \
  void Int8PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::int8_t* q,        \
                             const float* scale, const float* bias, std::uint16_t* out, std::int64_t N,           \
                             std::int64_t p_begin, std::int64_t p_end, std::uint16_t* panel);                     \
  void Int4PanelLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint8_t* packed,  \
                             const float* scale, const std::uint8_t* zero, std::int64_t group, const float* bias, \
                             std::uint16_t* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end,        \
                             std::uint16_t* panel);                                                               \
  }
ROPESERVE_PANEL_CORES(avx512)
ROPESERVE_PANEL_CORES(amx)
#undef ROPESERVE_PANEL_CORES
namespace amx {
void PackedLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint16_t* packed,
                        const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin,
                        std::int64_t p_end);
}  // namespace amx
#endif

#if defined(__aarch64__)
namespace neon {
void PackedLinearF32Panels(const float* x, std::int64_t M, std::int64_t K, const float* packed, const float* bias,
                           float* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end);
void PackedLinearPanels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint16_t* packed,
                        const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin,
                        std::int64_t p_end);
void Int8LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp, const std::int8_t* w,
                     const float* ws, std::int64_t K, const float* bias, void* out, bool out_bf16, std::int64_t N,
                     std::int64_t n_begin, std::int64_t n_end);
void Int4LinearRange(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp,
                     const std::uint8_t* packed, const float* scale, const std::uint16_t* scale16,
                     const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias, void* out,
                     bool out_bf16, std::int64_t N, std::int64_t n_begin, std::int64_t n_end);
}  // namespace neon
#endif

namespace {

#if defined(__x86_64__)
// One widened bf16 panel per thread for the AVX-512 and AMX panel paths,
// reused across calls (K x 64 x 2 bytes: 112 KB at K = 896, inside L2).
std::uint16_t* PanelScratch(std::int64_t K) {
  thread_local std::vector<std::uint16_t> panel;
  const auto values = static_cast<std::size_t>((K + 1) / 2 * 2 * 64);
  if (panel.size() < values) panel.resize(values);
  return panel.data();
}

// AVX-512's item takes head sizes 16-256 in powers of two; AVX2's every
// multiple of 8.
bool AttendAvx512(const AttentionItem& item) { return avx512::AttendItem(item) || avx2::AttendItem(item); }

template <auto Core>
void Int8Panels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::int8_t* q, const float* scale,
                const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin, std::int64_t p_end) {
  Core(x, M, K, q, scale, bias, out, N, p_begin, p_end, PanelScratch(K));
}

template <auto Core>
void Int4Panels(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint8_t* packed, const float* scale,
                const std::uint8_t* zero, std::int64_t group, const float* bias, std::uint16_t* out, std::int64_t N,
                std::int64_t p_begin, std::int64_t p_end) {
  Core(x, M, K, packed, scale, zero, group, bias, out, N, p_begin, p_end, PanelScratch(K));
}
#endif

CpuKernels Generic() {
  CpuKernels k;
  k.isa = Isa::kGeneric;
  k.packed_linear_panels = generic::PackedLinearPanels;
  k.packed_linear_f32_panels = generic::PackedLinearF32Panels;
  k.int8_panel_linear_panels = generic::Int8PanelLinearPanels;
  k.int4_panel_linear_panels = generic::Int4PanelLinearPanels;
  k.quantize_rows_int16 = generic::QuantizeRowsInt16;
  k.int8_linear_range = generic::Int8LinearRange;
  k.dequantize_int8_rows = generic::DequantizeRows;
  k.int4_linear_range = generic::Int4LinearRange;
  k.quantize_groups_int8 = generic::QuantizeGroupsInt8;
  k.int4_linear_range_int8_x = generic::Int4LinearRangeInt8X;
  k.attend_item = generic::AttendItem;
  k.rms_norm_rows_bf16 = generic::RmsNormRowsBf16;
  k.silu_and_mul_rows_bf16 = generic::SiluAndMulRowsBf16;
  k.summarize_row = generic::SummarizeRow;
  return k;
}

CpuKernels Build(Isa isa) {
  CpuKernels k = Generic();
  k.isa = isa;
#if defined(__x86_64__)
  if (isa >= Isa::kAvx2) {
    k.vector_bf16_gemm = true;
    k.packed_linear_panels = avx2::PackedLinearPanels;
    k.packed_linear_panels_float_x = avx2::PackedLinearPanelsFloatX;
    k.packed_linear_f32_panels = avx2::PackedLinearF32Panels;
    k.int8_panel_linear_panels = avx2::Int8PanelLinearPanels;
    k.int4_panel_linear_panels = avx2::Int4PanelLinearPanels;
    k.quantize_rows_int16 = avx2::QuantizeRowsInt16;
    k.int8_linear_range = avx2::Int8LinearRange;
    k.dequantize_int8_rows = avx2::DequantizeRows;
    k.int4_linear_range = avx2::Int4LinearRange;
    k.int4_int8_x = true;
    k.quantize_groups_int8 = avx2::QuantizeGroupsInt8;
    k.int4_linear_range_int8_x = avx2::Int4LinearRangeInt8X;
    k.int8_kernel_max_rows = kEveryRowCount;
    k.int4_kernel_max_rows = kEveryRowCount;
    k.attend_item = avx2::AttendItem;
    k.rms_norm_rows_bf16 = avx2::RmsNormRowsBf16;
    k.silu_and_mul_rows_bf16 = avx2::SiluAndMulRowsBf16;
    k.summarize_row = avx2::SummarizeRow;
  }
  if (isa >= Isa::kAvx512) {
    // The AVX-512 files use the extensions named here beyond F/BW/VL/DQ;
    // without them (Skylake-SP: no BF16 or VNNI) the AVX2 variants stay.
    // The ISA is the one being built, not the active one: read the CPU.
    const bool bf16 = DetectedCpu().avx512_bf16, vnni = DetectedCpu().avx512_vnni;
    k.summarize_row = avx512::SummarizeRow;
    k.packed_linear_f32_panels = avx512::PackedLinearF32Panels;
    if (bf16) {
      k.packed_linear_panels = avx512::PackedLinearPanels;
      k.packed_linear_panels_float_x = nullptr;
      k.int8_panel_linear_panels = Int8Panels<avx512::Int8PanelLinearPanels>;
      k.int4_panel_linear_panels = Int4Panels<avx512::Int4PanelLinearPanels>;
      k.attend_item = AttendAvx512;
      k.rms_norm_rows_bf16 = avx512::RmsNormRowsBf16;
      k.silu_and_mul_rows_bf16 = avx512::SiluAndMulRowsBf16;
    }
    if (vnni) {
      k.quantize_rows_int16 = avx512::QuantizeRowsInt16;
      k.int8_linear_range = avx512::Int8LinearRange;
      k.dequantize_int8_rows = avx512::DequantizeRows;
      k.int4_linear_range = avx512::Int4LinearRange;
      k.int4_int8_x = false;  // vpdpwssd: int16 x at the byte form's rate
      k.int8_kernel_max_rows = kVnniInt8KernelMaxRows;
      k.int4_kernel_max_rows = kVnniInt4KernelMaxRows;
    }
  }
  if (isa >= Isa::kAmx) {
    k.amx_packed_linear_panels = amx::PackedLinearPanels;
    k.amx_int8_panel_linear_panels = Int8Panels<amx::Int8PanelLinearPanels>;
    k.amx_int4_panel_linear_panels = Int4Panels<amx::Int4PanelLinearPanels>;
  }
#endif
#if defined(__aarch64__)
  if (isa == Isa::kNeon) {
    // The rest stays generic on ARM for now (kernels/cpu/README.md).
    k.vector_bf16_gemm = true;
    k.packed_linear_panels = neon::PackedLinearPanels;
    k.packed_linear_f32_panels = neon::PackedLinearF32Panels;
    k.int8_linear_range = neon::Int8LinearRange;
    k.int4_linear_range = neon::Int4LinearRange;
    k.attend_item = neon::AttendItem;
  }
#endif
  return k;
}

}  // namespace

const CpuKernels& KernelsFor(Isa isa) {
  static const std::array<CpuKernels, 5> tables = [] {
    std::array<CpuKernels, 5> t;
    for (Isa i : RunnableIsas()) t[static_cast<int>(i)] = Build(i);
    return t;
  }();
  return tables[static_cast<int>(isa)];
}

const CpuKernels& ActiveKernels() { return KernelsFor(ActiveIsa()); }

std::int64_t EffectiveInt8VnniMaxRows(const KernelConfig& config) {
  if (config.int8_vnni_max_rows) return *config.int8_vnni_max_rows;
  return KernelsFor(config.isa.value_or(BestIsa())).int8_kernel_max_rows;
}

std::vector<std::pair<std::string, std::string>> DescribeKernelConfig(const KernelConfig& c) {
  const Isa isa = c.isa.value_or(BestIsa());
  return {{"isa", IsaName(isa)},
          {"isa_requested", c.isa ? IsaName(*c.isa) : "auto"},
          {"cpu", CpuModelName()},
          {"cpu_extensions", CpuExtensions()},
          {"pool_spin_us", std::to_string(c.pool_spin_us)},
          {"int8_vnni_max_rows", std::to_string(EffectiveInt8VnniMaxRows(c))},
          {"int4_kernel_max_rows", std::to_string(KernelsFor(isa).int4_kernel_max_rows)},
          {"int4_activations", KernelsFor(isa).int4_int8_x ? "int8_per_group" : "int16_per_row"},
          {"amx_min_rows", std::to_string(c.amx_min_rows)}};
}

}  // namespace ropeserve::cpu
