// SummarizeRows (kernels.h): each row's max, lowest argmax and logsumexp in
// one kernel, the device twin of kernels/cpu/logits_summary.h (issue 57:
// LibTorch's max(1) and logsumexp(1) were about ten kernels a step).
//
// One block of 1024 threads per row, two passes over the row (a 152k-entry
// row is 0.6 MB: read twice from L2/HBM, a few microseconds): (max, id)
// folded per thread over strided entries and merged across the block,
// then the exponentials' sum against that max. NaN ranks above every
// number (its first id wins), as LibTorch's max; -inf entries add nothing;
// a row of -inf gives -inf, a row holding +inf (no NaN) +inf.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace ropeserve::cuda {

namespace {

constexpr int kThreads = 1024;

// Whether (v, j) ranks above (m, i): NaN first, then larger, then the lower id.
__device__ __forceinline__ bool Ranks(float v, std::int64_t j, float m, std::int64_t i) {
  const bool vn = isnan(v), mn = isnan(m);
  if (vn != mn) return vn;
  if (!vn && v != m) return v > m;
  return j < i;
}

__global__ void __launch_bounds__(kThreads)
    SummarizeRowsKernel(const float* __restrict__ logits, std::int64_t n, float* __restrict__ logsumexp,
                        float* __restrict__ max, std::int64_t* __restrict__ argmax, std::int64_t rows,
                        std::int32_t* __restrict__ packed) {
  __shared__ float sm_m[kThreads / 32];
  __shared__ std::int64_t sm_i[kThreads / 32];
  __shared__ float scratch[32];
  const std::int64_t r = blockIdx.x;
  const float* x = logits + r * n;
  float m = -INFINITY;
  std::int64_t id = INT64_MAX;
  for (std::int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float v = x[j];
    if (Ranks(v, j, m, id)) {
      m = v;
      id = j;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const std::int64_t i2 = __shfl_xor_sync(0xffffffffu, id, o);
    if (Ranks(m2, i2, m, id)) {
      m = m2;
      id = i2;
    }
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    sm_m[warp] = m;
    sm_i[warp] = id;
  }
  __syncthreads();
  m = sm_m[0];
  id = sm_i[0];
  for (int w = 1; w < kThreads / 32; ++w) {
    if (Ranks(sm_m[w], sm_i[w], m, id)) {
      m = sm_m[w];
      id = sm_i[w];
    }
  }
  // Every thread now holds the row's (max, id).
  float lse;
  if (isnan(m) || m == INFINITY || m == -INFINITY) {
    lse = m;
  } else {
    float s = 0.f;
    for (std::int64_t j = threadIdx.x; j < n; j += kThreads) s += __expf(x[j] - m);
    lse = m + logf(detail::BlockSum(s, scratch));
  }
  if (threadIdx.x == 0) {
    logsumexp[r] = lse;
    max[r] = m;
    argmax[r] = id;
    if (packed != nullptr) {
      packed[r] = __float_as_int(m);  // the greedy token's logit
      packed[rows + r] = static_cast<std::int32_t>(id);
    }
  }
}

}  // namespace

int SummarizeRows(const float* logits, std::int64_t rows, std::int64_t n, float* logsumexp, float* max,
                  std::int64_t* argmax, Stream stream, std::int32_t* packed) {
  if (rows == 0) return 0;
  if (n <= 0) return static_cast<int>(cudaErrorInvalidValue);
  SummarizeRowsKernel<<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, n, logsumexp, max, argmax, rows, packed);
  return detail::LaunchStatus();
}

}  // namespace ropeserve::cuda
