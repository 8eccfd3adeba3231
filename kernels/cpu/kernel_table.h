// The CPU kernels' cores, one table per ISA: each entry is the variant of
// one kernel family that the ISA runs (its own where one pays, else the
// variant of the ISA below it, down to the scalar generic one, which is
// the reference the others are tested against). The LibTorch glue of each
// family (packed_linear.cc, int8_linear.cc, ...) calls ActiveKernels()'s
// entries; tests call KernelsFor(isa)'s to run every variant this CPU can
// execute. Torch-free: raw pointers, sizes and strides (the cores' own
// files say their arithmetic).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_config.h"
#include "kernels/cpu/paged_attention_core.h"

namespace ropeserve::cpu {

// Row-count crossovers (CpuKernels::int8_kernel_max_rows /
// int4_kernel_max_rows): VNNI's, measured, which the ISAs without a
// measurement of their own keep too; and one that every call stays under
// (the matrix-vector kernels' own limit, kInt8KernelMaxRows /
// kInt4KernelMaxRows).
inline constexpr std::int64_t kVnniInt8KernelMaxRows = 16;
inline constexpr std::int64_t kVnniInt4KernelMaxRows = 48;
inline constexpr std::int64_t kEveryRowCount = std::int64_t{1} << 16;

struct CpuKernels {
  Isa isa = Isa::kGeneric;
  // Whether packed_linear_panels is a vector variant (not the scalar
  // reference): `--dtype auto` picks bfloat16 compute only then.
  bool vector_bf16_gemm = false;

  // packed_linear.h: panels [p_begin, p_end) of y [M, N] = x [M, K] times
  // the packed bf16 weights (+ bias float32 [N] or null), bf16 out.
  void (*packed_linear_panels)(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint16_t* packed,
                               const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin,
                               std::int64_t p_end) = nullptr;
  // The same from x already widened to float32 ([M, K]), for variants
  // whose GEMM computes in float32 (AVX2): the glue widens x once per call
  // rather than each chunk of panels once; for more than 2 rows. Null
  // where the variant reads bf16 x itself.
  void (*packed_linear_panels_float_x)(const float* xf, std::int64_t M, std::int64_t K, const std::uint16_t* packed,
                                       const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin,
                                       std::int64_t p_end) = nullptr;
  // Float32 panels ([ceil(N/64), K, 64] float32): y [M, N] float32 from
  // float32 x; one fma chain over k per output in every variant, so every
  // ISA gives the same bits, whatever M.
  void (*packed_linear_f32_panels)(const float* x, std::int64_t M, std::int64_t K, const float* packed,
                                   const float* bias, float* out, std::int64_t N, std::int64_t p_begin,
                                   std::int64_t p_end) = nullptr;
  // The same over int8 weights q [N, K] with float32 scales [N] (applied
  // to the sums), and over int4 weights (kernels/int4_weight.h's layout; each
  // weight dequantized and rounded to bfloat16 first).
  void (*int8_panel_linear_panels)(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::int8_t* q,
                                   const float* scale, const float* bias, std::uint16_t* out, std::int64_t N,
                                   std::int64_t p_begin, std::int64_t p_end) = nullptr;
  void (*int4_panel_linear_panels)(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint8_t* packed,
                                   const float* scale, const std::uint8_t* zero, std::int64_t group, const float* bias,
                                   std::uint16_t* out, std::int64_t N, std::int64_t p_begin,
                                   std::int64_t p_end) = nullptr;
  // The AMX tiles' packed GEMM (the same three), set only in the amx table.
  void (*amx_packed_linear_panels)(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::uint16_t* packed,
                                   const float* bias, std::uint16_t* out, std::int64_t N, std::int64_t p_begin,
                                   std::int64_t p_end) = nullptr;
  void (*amx_int8_panel_linear_panels)(const std::uint16_t* x, std::int64_t M, std::int64_t K, const std::int8_t* q,
                                       const float* scale, const float* bias, std::uint16_t* out, std::int64_t N,
                                       std::int64_t p_begin, std::int64_t p_end) = nullptr;
  void (*amx_int4_panel_linear_panels)(const std::uint16_t* x, std::int64_t M, std::int64_t K,
                                       const std::uint8_t* packed, const float* scale, const std::uint8_t* zero,
                                       std::int64_t group, const float* bias, std::uint16_t* out, std::int64_t N,
                                       std::int64_t p_begin, std::int64_t p_end) = nullptr;

  // int8_linear.h: x rows (float32 or bf16 [M, K]) to int16 levels [M, Kp]
  // (zero past K) and their scales; the same levels in every variant.
  void (*quantize_rows_int16)(const void* x, bool bf16, std::int64_t M, std::int64_t K, std::int64_t Kp, int levels,
                              std::int16_t* xq, float* scales) = nullptr;
  // Output columns [n_begin, n_end) of y [M, N] from int16 x and int8 weights.
  void (*int8_linear_range)(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp,
                            const std::int8_t* w, const float* ws, std::int64_t K, const float* bias, void* out,
                            bool out_bf16, std::int64_t N, std::int64_t n_begin, std::int64_t n_end) = nullptr;
  // Rows [n_begin, n_end) of q [N, K] * scale as bf16 or float32.
  void (*dequantize_int8_rows)(const std::int8_t* q, const float* scale, std::int64_t K, void* out, bool out_bf16,
                               std::int64_t n_begin, std::int64_t n_end) = nullptr;
  // int4_linear.h: output columns [n_begin, n_end) of y [M, N] from int16 x
  // and group-wise int4 weights (scale16: the float16 copy, or null).
  void (*int4_linear_range)(const std::int16_t* xq, const float* xs, std::int64_t M, std::int64_t Kp,
                            const std::uint8_t* packed, const float* scale, const std::uint16_t* scale16,
                            const std::uint8_t* zero, std::int64_t K, std::int64_t group_size, const float* bias,
                            void* out, bool out_bf16, std::int64_t N, std::int64_t n_begin,
                            std::int64_t n_end) = nullptr;
  // The int4 kernel's second form (int4_linear.h): x rows as int8 levels
  // per group of the weights' columns, with each group's scale and sum of
  // levels; for ISAs whose byte dot product does twice the products of
  // their int16 one (AVX2's vpmaddubsw; AVX-512 has vpdpwssd). Which form
  // Int4Linear runs: int4_int8_x. Generic has the scalar reference of both.
  bool int4_int8_x = false;
  void (*quantize_groups_int8)(const void* x, bool bf16, std::int64_t M, std::int64_t K, std::int64_t Kp,
                               std::int64_t group_size, std::int8_t* xq, float* scales, std::int32_t* sums) = nullptr;
  void (*int4_linear_range_int8_x)(const std::int8_t* xq, const float* xs, const std::int32_t* xsum, std::int64_t M,
                                   std::int64_t Kp, const std::uint8_t* packed, const float* scale,
                                   const std::uint16_t* scale16, const std::uint8_t* zero, std::int64_t K,
                                   std::int64_t group_size, const float* bias, void* out, bool out_bf16, std::int64_t N,
                                   std::int64_t n_begin, std::int64_t n_end) = nullptr;

  // Up to how many rows of x int8 / int4 linears run int8_linear_range /
  // int4_linear_range rather than the packed GEMM over widened panels
  // (int8_linear.h, int4_linear.h): where the two cross on this ISA
  // (measured: docs/benchmarks.md). With VNNI 16 / 48; on AVX2 the
  // matrix-vector kernels' vpmaddwd outruns the panels' float32 fmas at
  // the row counts measured (1-2048; int4 level at 512), so they take
  // every count. int8's is the default of --kernel-int8-vnni-max-rows.
  std::int64_t int8_kernel_max_rows = kVnniInt8KernelMaxRows;
  std::int64_t int4_kernel_max_rows = kVnniInt4KernelMaxRows;

  // paged_attention_core.h: one work item; false when the variant cannot
  // take its shape (the generic one takes every shape).
  bool (*attend_item)(const AttentionItem& item) = nullptr;
  // fused_ops_core.h: bf16 rows of RmsNorm / AddRmsNorm and SiluAndMul.
  void (*rms_norm_rows_bf16)(const std::uint16_t* x, std::uint16_t* residual, const std::uint16_t* w,
                             std::uint16_t* out, std::int64_t row_begin, std::int64_t row_end, std::int64_t n,
                             double eps) = nullptr;
  void (*silu_and_mul_rows_bf16)(const std::uint16_t* gate_up, std::uint16_t* out, std::int64_t row_begin,
                                 std::int64_t row_end, std::int64_t I) = nullptr;
  // logits_summary.h: one float32 row's logsumexp, max and lowest argmax.
  void (*summarize_row)(const float* x, std::int64_t n, float* lse, float* max, std::int64_t* argmax) = nullptr;
};

// The table of the active ISA (ActiveIsa()), built once.
const CpuKernels& ActiveKernels();
// The table of `isa`, which this CPU must run (CpuCanRun): what a forced
// ISA runs, for tests and benchmarks.
const CpuKernels& KernelsFor(Isa isa);

// The int8 crossover in effect under `config` (kernel_config.h): the one
// set, else its ISA's table's.
std::int64_t EffectiveInt8VnniMaxRows(const KernelConfig& config);
// name -> value, for the log and /v1/info ("isa": "avx2", "isa_requested":
// "auto", "cpu": the model name, "cpu_extensions", the crossovers in effect,
// ...). Here rather than in kernel_config.cc, which stays free of the
// kernels' tables (the thread pool's sanitizer test builds it alone).
std::vector<std::pair<std::string, std::string>> DescribeKernelConfig(const KernelConfig& config);

}  // namespace ropeserve::cpu
