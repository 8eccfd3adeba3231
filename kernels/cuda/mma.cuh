// The tensor-core instruction the attention and 4-bit kernels share
// (mma.sync m16n8k16, sm_80 and later) and the packing of its 16-bit
// operand pairs. Fragment layouts, as the PTX ISA defines them for lane l
// (g = l / 4, t = l % 4): A (16 x 16, row-major) a[0] = row g, k 2t..2t+1;
// a[1] = row g + 8, same k; a[2] = row g, k 2t+8..2t+9; a[3] = row g + 8,
// k 2t+8..2t+9. B (16 x 8) b0 = k 2t..2t+1, column g; b1 = k 2t+8..2t+9.
// C / D (16 x 8) d[0], d[1] = row g, columns 2t, 2t+1; d[2], d[3] = row g + 8.
// The lower k (or column) of a pair in the low 16 bits.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace ropeserve::cuda::detail {

// d += a (16x16, row-major fragments) * b (16x8, column-major), float32 sums.
template <typename T>
__device__ __forceinline__ void Mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T, `lo` in the low 16 bits (the lower k index).
template <typename T>
__device__ __forceinline__ std::uint32_t Pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return static_cast<std::uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
           (static_cast<std::uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
  } else {
    return static_cast<std::uint32_t>(__half_as_ushort(__float2half_rn(lo))) |
           (static_cast<std::uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16);
  }
}

}  // namespace ropeserve::cuda::detail
