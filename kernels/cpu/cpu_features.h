// Which AVX-512 extensions the kernels may use: what the CPU has, unless the
// kernel configuration turns AVX-512 off (kernels/cpu/kernel_config.h).
#pragma once

#include <cstdint>

namespace ropeserve::cpu {

// avx512f + avx512bw + avx512vl and avx512_bf16 / avx512_vnni (the CPU is
// asked once per process; the kernels ask on every call).
bool CpuHasAvx512Bf16();
// avx512f + avx512bw + avx512vl + avx512dq alone.
bool CpuHasAvx512();
bool CpuHasAvx512Vnni();
// AMX-TILE + AMX-BF16 (and avx512_bf16), enabled by the OS (XCR0) and
// granted to this process (Linux's arch_prctl(ARCH_REQ_XCOMP_PERM), asked
// once); false when the kernel configuration turns AVX-512 off. (Whether a
// linear uses the tiles: PackedLinearUsesAmx, packed_linear.h.)
bool CpuHasAmxBf16();

}  // namespace ropeserve::cpu
