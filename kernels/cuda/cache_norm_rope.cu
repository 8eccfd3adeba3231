// Cache writes, RMSNorm (plain and fused with the residual add) and
// rotate-half RoPE: the memory-bound element-wise kernels of a layer.
#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace ropeserve::cuda {

namespace {

using detail::FromFloat;
using detail::Round;
using detail::ToFloat;

template <typename T>
__global__ void ReshapeAndCacheKernel(const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ k_cache,
                                      T* __restrict__ v_cache, const std::int64_t* __restrict__ slot_mapping,
                                      std::int64_t width, std::int64_t key_stride, std::int64_t value_stride) {
  const std::int64_t t = blockIdx.x;
  const std::int64_t slot = slot_mapping[t];
  if (slot < 0) return;  // padding
  for (std::int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    k_cache[slot * width + i] = k[t * key_stride + i];
    v_cache[slot * width + i] = v[t * value_stride + i];
  }
}

// One block per row. x is read twice (sum of squares, then scale) and is
// small enough to stay in L1/L2.
template <typename T>
__global__ void RmsNormKernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
                              std::int64_t hidden, float eps) {
  __shared__ float scratch[32];
  const T* row = x + blockIdx.x * hidden;
  float ss = 0;
  for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float v = ToFloat(row[i]);
    ss += v * v;
  }
  const float r = rsqrtf(detail::BlockSum(ss, scratch) / static_cast<float>(hidden) + eps);
  for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x)
    out[blockIdx.x * hidden + i] = FromFloat<T>(Round<T>(ToFloat(row[i]) * r) * ToFloat(w[i]));
}

template <typename T>
__global__ void FusedAddRmsNormKernel(T* __restrict__ x, T* __restrict__ residual, const T* __restrict__ w,
                                      std::int64_t hidden, float eps) {
  __shared__ float scratch[32];
  T* xr = x + blockIdx.x * hidden;
  T* rr = residual + blockIdx.x * hidden;
  float ss = 0;
  for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const T h = FromFloat<T>(ToFloat(rr[i]) + ToFloat(xr[i]));  // h = h + x, rounded as the dtype does
    rr[i] = h;
    const float v = ToFloat(h);
    ss += v * v;
  }
  const float r = rsqrtf(detail::BlockSum(ss, scratch) / static_cast<float>(hidden) + eps);
  for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x)
    xr[i] = FromFloat<T>(Round<T>(ToFloat(rr[i]) * r) * ToFloat(w[i]));
}

// One block per token, threads over the intermediate columns.
template <typename T>
__global__ void SiluAndMulKernel(T* __restrict__ out, const T* __restrict__ gate_up, std::int64_t intermediate) {
  const T* gate = gate_up + blockIdx.x * 2 * intermediate;
  const T* up = gate + intermediate;
  T* o = out + blockIdx.x * intermediate;
  for (std::int64_t i = threadIdx.x; i < intermediate; i += blockDim.x) {
    const float g = ToFloat(gate[i]);
    o[i] = FromFloat<T>(Round<T>(g / (1.0f + expf(-g))) * ToFloat(up[i]));
  }
}

// Rotates pair (x1, x2) by (c, s), each product and difference rounded on
// its own (no fused multiply-add), so RopeKernel and RopeAndCacheKernel
// give the same bits whatever the compiler contracts.
__device__ __forceinline__ void RotatePair(float x1, float x2, float c, float s, float& y1, float& y2) {
  y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

// Pair i of the head at x (x[i], x[i + half]) rotated in place by the
// position's table row cs (cos for i < half, then sin).
template <typename T>
__device__ __forceinline__ void RotateInPlace(T* x, std::int64_t i, std::int64_t half, const float* cs) {
  float y1, y2;
  RotatePair(ToFloat(x[i]), ToFloat(x[i + half]), cs[i], cs[half + i], y1, y2);
  x[i] = FromFloat<T>(y1);
  x[i + half] = FromFloat<T>(y2);
}

// One block per token; threads over (head, pair). Pair i of a head is
// (x[i], x[i + rotary_dim / 2]).
template <typename T>
__global__ void RopeKernel(const std::int64_t* __restrict__ positions, T* __restrict__ q, T* __restrict__ k,
                           const float* __restrict__ cos_sin, std::int64_t num_heads, std::int64_t num_kv_heads,
                           std::int64_t head_dim, std::int64_t rotary_dim, std::int64_t q_stride,
                           std::int64_t k_stride) {
  const std::int64_t t = blockIdx.x;
  const std::int64_t half = rotary_dim / 2;
  const float* cs = cos_sin + positions[t] * rotary_dim;
  const std::int64_t pairs = (num_heads + num_kv_heads) * half;
  for (std::int64_t j = threadIdx.x; j < pairs; j += blockDim.x) {
    const std::int64_t head = j / half, i = j % half;
    T* x = head < num_heads ? q + t * q_stride + head * head_dim : k + t * k_stride + (head - num_heads) * head_dim;
    RotateInPlace(x, i, half, cs);
  }
}

// RopeKernel on q, and in the same block k rotated into its cache slot
// (k itself untouched) and v copied into its: one block per token.
template <typename T>
__global__ void RopeAndCacheKernel(const std::int64_t* __restrict__ positions, T* __restrict__ q,
                                   const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ k_cache,
                                   T* __restrict__ v_cache, const std::int64_t* __restrict__ slot_mapping,
                                   const float* __restrict__ cos_sin, std::int64_t num_heads, std::int64_t num_kv_heads,
                                   std::int64_t head_dim, std::int64_t rotary_dim, std::int64_t q_stride,
                                   std::int64_t k_stride, std::int64_t v_stride) {
  const std::int64_t t = blockIdx.x;
  const std::int64_t half = rotary_dim / 2;
  const float* cs = cos_sin + positions[t] * rotary_dim;
  for (std::int64_t j = threadIdx.x; j < num_heads * half; j += blockDim.x)
    RotateInPlace(q + t * q_stride + (j / half) * head_dim, j % half, half, cs);
  const std::int64_t slot = slot_mapping[t];
  if (slot < 0) return;  // padding: q rotated (as RopeKernel does), nothing cached
  const std::int64_t width = num_kv_heads * head_dim;
  for (std::int64_t j = threadIdx.x; j < width; j += blockDim.x) {
    const std::int64_t e = j % head_dim;
    const T* x = k + t * k_stride + (j / head_dim) * head_dim;
    T out = x[e];  // past rotary_dim: as it is
    if (e < rotary_dim) {
      const std::int64_t i = e < half ? e : e - half;
      float y1, y2;
      RotatePair(ToFloat(x[i]), ToFloat(x[i + half]), cs[i], cs[half + i], y1, y2);
      out = FromFloat<T>(e < half ? y1 : y2);
    }
    k_cache[slot * width + j] = out;
    v_cache[slot * width + j] = v[t * v_stride + j];
  }
}

int Threads(std::int64_t work) {
  int t = 32;
  while (t < 1024 && t < work) t *= 2;
  return t;
}

}  // namespace

int ReshapeAndCache(const void* k, const void* v, void* k_cache, void* v_cache, const std::int64_t* slot_mapping,
                    std::int64_t num_tokens, std::int64_t num_kv_heads, std::int64_t head_dim, std::int64_t key_stride,
                    std::int64_t value_stride, DType dtype, Stream stream) {
  if (num_tokens == 0) return 0;
  const std::int64_t width = num_kv_heads * head_dim;
  return detail::Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    ReshapeAndCacheKernel<T><<<num_tokens, Threads(width), 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(k_cache), static_cast<T*>(v_cache),
        slot_mapping, width, key_stride, value_stride);
  });
}

int RmsNorm(void* out, const void* x, const void* weight, std::int64_t rows, std::int64_t hidden, float eps,
            DType dtype, Stream stream) {
  if (rows == 0) return 0;
  return detail::Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    RmsNormKernel<T><<<rows, Threads(hidden), 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(weight), hidden, eps);
  });
}

int FusedAddRmsNorm(void* x, void* residual, const void* weight, std::int64_t rows, std::int64_t hidden, float eps,
                    DType dtype, Stream stream) {
  if (rows == 0) return 0;
  return detail::Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    FusedAddRmsNormKernel<T><<<rows, Threads(hidden), 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<T*>(x), static_cast<T*>(residual), static_cast<const T*>(weight), hidden, eps);
  });
}

int SiluAndMul(void* out, const void* gate_up, std::int64_t num_tokens, std::int64_t intermediate, DType dtype,
               Stream stream) {
  if (num_tokens == 0 || intermediate == 0) return 0;
  return detail::Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    SiluAndMulKernel<T><<<num_tokens, Threads(intermediate), 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<T*>(out), static_cast<const T*>(gate_up), intermediate);
  });
}

int RopeAndCache(const std::int64_t* positions, void* q, const void* k, const void* v, void* k_cache, void* v_cache,
                 const std::int64_t* slot_mapping, const float* cos_sin, std::int64_t num_tokens,
                 std::int64_t num_heads, std::int64_t num_kv_heads, std::int64_t head_dim, std::int64_t rotary_dim,
                 std::int64_t q_stride, std::int64_t k_stride, std::int64_t v_stride, DType dtype, Stream stream) {
  if (num_tokens == 0) return 0;
  if (rotary_dim % 2 != 0 || rotary_dim > head_dim) return static_cast<int>(cudaErrorInvalidValue);
  const std::int64_t work = std::max(num_heads * rotary_dim / 2, num_kv_heads * head_dim);
  return detail::Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    RopeAndCacheKernel<T><<<num_tokens, Threads(work), 0, static_cast<cudaStream_t>(stream)>>>(
        positions, static_cast<T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(k_cache),
        static_cast<T*>(v_cache), slot_mapping, cos_sin, num_heads, num_kv_heads, head_dim, rotary_dim, q_stride,
        k_stride, v_stride);
  });
}

int RotaryEmbedding(const std::int64_t* positions, void* q, void* k, const float* cos_sin, std::int64_t num_tokens,
                    std::int64_t num_heads, std::int64_t num_kv_heads, std::int64_t head_dim, std::int64_t rotary_dim,
                    std::int64_t q_stride, std::int64_t k_stride, DType dtype, Stream stream) {
  if (num_tokens == 0) return 0;
  if (rotary_dim % 2 != 0 || rotary_dim > head_dim) return static_cast<int>(cudaErrorInvalidValue);
  return detail::Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    RopeKernel<T>
        <<<num_tokens, Threads((num_heads + num_kv_heads) * rotary_dim / 2), 0, static_cast<cudaStream_t>(stream)>>>(
            positions, static_cast<T*>(q), static_cast<T*>(k), cos_sin, num_heads, num_kv_heads, head_dim, rotary_dim,
            q_stride, k_stride);
  });
}

}  // namespace ropeserve::cuda
