// Group-wise 4-bit weights times 16-bit activations for few rows (decode,
// speculative verification): y = x W^T + b, W dequantized on the fly from
// the packed nibbles, each weight read once per call for all rows.
#include "kernels/cuda/common.cuh"

namespace ropeserve::cuda {

namespace {

using detail::FromFloat;
using detail::ToFloat;

constexpr int kWarpsPerBlock = 4;

// Eight 16-bit values of x (16 bytes) as floats.
template <typename T>
__device__ __forceinline__ void Load8(const T* p, float* out) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const T* h = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = ToFloat(h[i]);
}

// One warp per output column n. Lane l reads the row's 16-byte chunks l,
// l + 32, ...: chunk c is half h = c % 2 of the 64-column block c / 2, its
// byte i holding column 64 (c / 2) + 16 h + i in the low nibble and that
// plus 32 in the high nibble (kernels/int4_weight.h's layout). Per run
// of 16 columns (one group: groups are >= 32 columns and aligned), each row
// sums (q - zero) * x in float32, then adds scale times that; the lanes'
// sums meet by a fixed butterfly. Row r's arithmetic does not depend on R
// or on the other rows.
template <typename T, int R>
__global__ void Int4GemvKernel(T* __restrict__ y, const T* __restrict__ x, std::int64_t rows,
                               const std::uint8_t* __restrict__ packed, const float* __restrict__ scale,
                               const std::uint8_t* __restrict__ zero, const float* __restrict__ bias, std::int64_t N,
                               std::int64_t K, std::int64_t group) {
  const std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const std::int64_t Kp = (K + 63) / 64 * 64, chunks = Kp / 32, G = K / group;
  const uint4* w = reinterpret_cast<const uint4*>(packed + n * (Kp / 2));
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (std::int64_t c = lane; c < chunks; c += 32) {
    const uint4 v = w[c];
    const std::uint8_t* b = reinterpret_cast<const std::uint8_t*>(&v);
    const std::int64_t col = (c / 2) * 64 + (c % 2) * 16;
#pragma unroll
    for (int part = 0; part < 2; ++part) {  // low nibbles: col..col+15; high: col+32..col+47
      const std::int64_t first = col + 32 * part;
      if (first >= K) break;  // the padding past K (K is a multiple of 32)
      const std::int64_t g = first / group;
      const float s = scale[n * G + g];
      const float z = static_cast<float>(zero[n * G + g]);
      float wq[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) wq[i] = static_cast<float>(part == 0 ? b[i] & 15 : b[i] >> 4) - z;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r >= rows) break;
        float xv[16];
        Load8(x + r * K + first, xv);
        Load8(x + r * K + first + 8, xv + 8);
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) sum = fmaf(wq[i], xv[i], sum);
        acc[r] = fmaf(s, sum, acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= rows) break;
    const float total = detail::WarpSum(acc[r]);
    if (lane == 0) y[r * N + n] = FromFloat<T>(bias == nullptr ? total : total + bias[n]);
  }
}

template <typename T, int R>
void Launch(void* y, const void* x, std::int64_t rows, const std::uint8_t* packed, const float* scale,
            const std::uint8_t* zero, const float* bias, std::int64_t N, std::int64_t K, std::int64_t group,
            cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  Int4GemvKernel<T, R><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), rows,
                                                                   packed, scale, zero, bias, N, K, group);
}

}  // namespace

int Int4Linear(void* y, const void* x, std::int64_t rows, const std::uint8_t* packed, const float* scale,
               const std::uint8_t* zero, const float* bias, std::int64_t N, std::int64_t K, std::int64_t group_size,
               DType dtype, Stream stream) {
  if (rows < 1 || rows > kInt4GemvMaxRows || K % 32 != 0 || K % group_size != 0 || N < 1) return cudaErrorInvalidValue;
  const auto s = static_cast<cudaStream_t>(stream);
  return detail::Dispatch(dtype, [&](auto t) {
    using T = decltype(t);
    // Accumulators for the rows rounded up to a power of two; the rest idle.
    detail::ForRows<1, 2, 4, 8, 16>(rows, [&](auto r) {
      Launch<T, decltype(r)::value>(y, x, rows, packed, scale, zero, bias, N, K, group_size, s);
    });
  });
}

}  // namespace ropeserve::cuda
