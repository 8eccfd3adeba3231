// Software prefetch of a weight stream for the matrix-vector kernels (int8,
// int4): at one or a few rows of x a kernel reads each weight byte once,
// and on this machine's VMs the hardware prefetchers alone leave it at
// about half the memory bandwidth (48 int4 matrices 4864 x 896 from
// memory, one thread: 15.2 ms without, 6.1-6.9 ms with a prefetch to L2
// 4-32 KB ahead, where the same loop over L2-resident weights takes ~5 ms;
// docs/benchmarks.md). Header-only, no LibTorch (the AVX-512 files include
// it); `static` as bf16_bits.h, so no file's copy is another's.
#pragma once

#include <xmmintrin.h>

#include <cstdint>

namespace ropeserve::cpu {

// How far ahead of the byte being read: far enough to cover the memory
// latency at the kernels' speed, near enough to stay in L2.
constexpr std::int64_t kWeightPrefetchBytes = 8192;

// Asks for the cache line kWeightPrefetchBytes past p into L2. A prefetch
// never faults, so past the end of the weights it is only a wasted hint.
[[maybe_unused]] static inline void PrefetchWeights(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kWeightPrefetchBytes, _MM_HINT_T1);
}

}  // namespace ropeserve::cpu
