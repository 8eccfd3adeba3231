// The bfloat16 row kernels of kernels/cpu/fused_ops.cc, with an
// implementation per ISA (fused_ops_{generic,avx2,avx512}.cc) chosen
// through the kernel table (kernel_table.h). No LibTorch header: each
// implementation is compiled with its own ISA flags.
//
// Rounding, in every variant: exactly where the LibTorch ops of the
// reference round (kernels/reference): RMSNorm's sum of squares in float32
// (the order of that sum differs between variants), normalised value
// rounded to bfloat16, times the weight, rounded; silu(g) in float32
// (exp: std::exp in the generic variant, the vector Exp within 2 ulp in
// the others) rounded to bfloat16, times up, rounded.
#pragma once

#include <cstdint>

namespace ropeserve::cpu {

#define ROPESERVE_FUSED_OPS_VARIANT(isa)                                                                            \
  namespace isa {                                                                                                   \
  /* Rows [row_begin, row_end) of RmsNorm / AddRmsNorm (residual null or not) on [rows, n] bfloat16. */             \
  void RmsNormRowsBf16(const std::uint16_t* x, std::uint16_t* residual, const std::uint16_t* w, std::uint16_t* out, \
                       std::int64_t row_begin, std::int64_t row_end, std::int64_t n, double eps);                   \
  /* Rows of out [rows, I] = silu(gate_up[:, :I]) * gate_up[:, I:], bfloat16. */                                    \
  void SiluAndMulRowsBf16(const std::uint16_t* gate_up, std::uint16_t* out, std::int64_t row_begin,                 \
                          std::int64_t row_end, std::int64_t I);                                                    \
  }
ROPESERVE_FUSED_OPS_VARIANT(generic)
ROPESERVE_FUSED_OPS_VARIANT(avx2)
ROPESERVE_FUSED_OPS_VARIANT(avx512)
#undef ROPESERVE_FUSED_OPS_VARIANT

}  // namespace ropeserve::cpu
