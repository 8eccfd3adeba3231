// Sampling on the device (see SampleRows in kernels.h): one block per row.
// Filters are thresholds on the unnormalised probabilities
// p_i = exp(x_i - max x) (the most likely token has p = 1), found by
// bisection with block-wide counts and sums, so no sort of the vocabulary
// is needed; the draw is Gumbel-max over the kept tokens.
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace ropeserve::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kBisections = 40;

// SplitMix64 over (seed, offset, index): a counter-based generator, so a
// row's draws depend only on its own seed and position.
__device__ __forceinline__ float Uniform(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  std::uint64_t z = seed ^ (offset * 0x9E3779B97F4A7C15ull) ^ (i * 0xD1B54A32D192ED03ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (static_cast<float>(z >> 40) + 0.5f) * (1.0f / 16777216.0f);  // (0, 1)
}

// Argmax of (value, index) over a warp, lowest index among equal values;
// every lane gets it.
__device__ __forceinline__ void WarpArgmax(float& v, std::int64_t& idx) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const std::int64_t oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) {
      v = ov;
      idx = oi;
    }
  }
}

// The same over the block; every thread gets it.
__device__ void BlockArgmax(float& v, std::int64_t& idx, float* sv, std::int64_t* si) {
  WarpArgmax(v, idx);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? sv[lane] : -FLT_MAX;
    idx = lane < warps ? si[lane] : INT64_MAX;
    WarpArgmax(v, idx);
    if (lane == 0) {
      sv[0] = v;
      si[0] = idx;
    }
  }
  __syncthreads();
  v = sv[0];
  idx = si[0];
}

__global__ void SampleRowsKernel(const float* __restrict__ logits, std::int64_t vocab,
                                 const float* __restrict__ temperature, const std::int32_t* __restrict__ top_k,
                                 const float* __restrict__ top_p, const float* __restrict__ min_p,
                                 const std::uint64_t* __restrict__ seed, const std::uint64_t* __restrict__ offset,
                                 std::int64_t* __restrict__ out) {
  __shared__ float scratch[32];
  __shared__ float sv[32];
  __shared__ std::int64_t si[32];
  const std::int64_t r = blockIdx.x;
  const float* x = logits + r * vocab;
  const float t = temperature[r];

  // Greedy, and the maximum every other path needs.
  float best = -FLT_MAX;
  std::int64_t best_i = INT64_MAX;
  for (std::int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
    if (x[i] > best) {  // strict: a thread's lowest index among its equal values
      best = x[i];
      best_i = i;
    }
  BlockArgmax(best, best_i, sv, si);
  if (!(t > 0.0f)) {
    if (threadIdx.x == 0) out[r] = best_i;
    return;
  }
  const float inv_t = 1.0f / t, top = best * inv_t;
  auto prob = [&](std::int64_t i) { return __expf(x[i] * inv_t - top); };  // most likely: 1
  auto count_mass = [&](float tau, float& count, float& mass) {
    float c = 0, s = 0;
    for (std::int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float p = prob(i);
      if (p >= tau) {
        c += 1;
        s += p;
      }
    }
    count = detail::BlockSum(c, scratch);
    mass = detail::BlockSum(s, scratch);
  };

  // top-k: the largest threshold that keeps at least k tokens.
  float tau = 0;
  float count = 0, mass = 0;
  const std::int32_t k = top_k[r];
  if (k > 0 && k < vocab) {
    float lo = 0, hi = 1;
    for (int it = 0; it < kBisections; ++it) {
      const float mid = 0.5f * (lo + hi);
      count_mass(mid, count, mass);
      if (count >= static_cast<float>(k))
        lo = mid;
      else
        hi = mid;
    }
    tau = lo;
  }
  // top-p over what top-k kept: the largest threshold whose kept mass
  // still reaches top_p of it (the most likely token always stays).
  const float pp = top_p[r];
  if (pp < 1.0f) {
    count_mass(tau, count, mass);
    const float target = pp * mass;
    float lo = tau, hi = 1;
    for (int it = 0; it < kBisections; ++it) {
      const float mid = 0.5f * (lo + hi);
      float c, m;
      count_mass(mid, c, m);
      if (m >= target)
        lo = mid;
      else
        hi = mid;
    }
    tau = lo;
  }
  // min-p: relative to the most likely token (p = 1).
  tau = fmaxf(tau, min_p[r]);

  // Gumbel-max over the kept tokens: argmax of log p_i + G_i.
  float g = -FLT_MAX;
  std::int64_t gi = INT64_MAX;
  for (std::int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float p = prob(i);
    if (p < tau || p <= 0.0f) continue;
    const float v = __logf(p) - __logf(-__logf(Uniform(seed[r], offset[r], static_cast<std::uint64_t>(i))));
    if (v > g) {
      g = v;
      gi = i;
    }
  }
  BlockArgmax(g, gi, sv, si);
  if (threadIdx.x == 0) out[r] = gi == INT64_MAX ? best_i : gi;
}

}  // namespace

int SampleRows(const float* logits, std::int64_t rows, std::int64_t vocab, const float* temperature,
               const std::int32_t* top_k, const float* top_p, const float* min_p, const std::uint64_t* seed,
               const std::uint64_t* offset, std::int64_t* out, Stream stream) {
  if (rows == 0) return 0;
  if (vocab <= 0) return static_cast<int>(cudaErrorInvalidValue);
  SampleRowsKernel<<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, vocab, temperature, top_k, top_p, min_p, seed, offset, out);
  return detail::LaunchStatus();
}

}  // namespace ropeserve::cuda
