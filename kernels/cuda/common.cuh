// Shared device helpers: 16-bit float conversion, block reductions, the
// dtype dispatch of the entry points.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/kernels.h"

namespace ropeserve::cuda::detail {

__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
// Rounds through T (the dtype's precision) and back.
template <typename T>
__device__ __forceinline__ float Round(float x) {
  return ToFloat(FromFloat<T>(x));
}

__device__ __forceinline__ float WarpSum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float WarpMax(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Sum / max over the block (blockDim.x a multiple of 32, <= 1024); every
// thread gets the result. `scratch`: 32 floats of shared memory.
template <typename Warp>
__device__ __forceinline__ float BlockReduce(float x, float* scratch, float identity, Warp warp_reduce) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_reduce(x);
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  return warp_reduce(lane < warps ? scratch[lane] : identity);
}
__device__ __forceinline__ float BlockSum(float x, float* scratch) {
  return BlockReduce(x, scratch, 0.0f, [](float v) { return WarpSum(v); });
}
__device__ __forceinline__ float BlockMax(float x, float* scratch) {
  return BlockReduce(x, scratch, -FLT_MAX, [](float v) { return WarpMax(v); });
}

inline int LaunchStatus() { return static_cast<int>(cudaGetLastError()); }

// Calls fn(T{}) with T the CUDA type of `dtype`.
template <typename Fn>
int Dispatch(DType dtype, Fn&& fn) {
  if (dtype == DType::kBF16) {
    fn(__nv_bfloat16{});
  } else {
    fn(__half{});
  }
  return LaunchStatus();
}

// Calls fn(std::integral_constant<int, C>{}) for the first C of Cs (in
// increasing order) with rows <= C: the template a launch is instantiated
// at for that many rows. Nothing when rows exceeds them all (callers
// check their limit first).
template <int... Cs, typename Fn>
void ForRows(std::int64_t rows, Fn&& fn) {
  bool done = false;
  ((!done && rows <= Cs ? (fn(std::integral_constant<int, Cs>{}), done = true) : false), ...);
}

}  // namespace ropeserve::cuda::detail
