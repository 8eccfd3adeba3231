// The AVX-512 bfloat16 paths of kernels/cpu/fused_ops.cc (no LibTorch
// header: the implementation is compiled with AVX-512 flags of its own).
#pragma once

#include <cstdint>

namespace ropeserve::cpu::avx512 {

// Rows [row_begin, row_end) of RmsNorm / AddRmsNorm (residual null or not) on [rows, n] bfloat16.
void RmsNormRowsBf16(const std::uint16_t* x, std::uint16_t* residual, const std::uint16_t* w, std::uint16_t* out,
                     std::int64_t row_begin, std::int64_t row_end, std::int64_t n, double eps);
// Rows of out [rows, I] = silu(gate_up[:, :I]) * gate_up[:, I:], bfloat16.
void SiluAndMulRowsBf16(const std::uint16_t* gate_up, std::uint16_t* out, std::int64_t row_begin, std::int64_t row_end,
                        std::int64_t I);

}  // namespace ropeserve::cpu::avx512
