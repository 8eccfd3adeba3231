// Int4MmaLayout (kernels/int4_weight.h), the weight order of the CUDA
// tensor-core kernel (kernels/cuda/int4_mma.cu), checked on any machine:
// the kernel's arithmetic is replayed here lane by lane in float64 (each
// lane's 16-byte loads of levels and x, its operand pairs, its zero
// points and scales, the group closings) and its operands placed into the
// 16x16 A and 16x8 B of each m16n8k16 step as the PTX ISA defines the
// fragments (kernels/cuda/mma.cuh's comment), every element exactly once;
// the product must equal x times the dequantized weights. A wrong layout,
// fragment mapping, k order, zero or scale column fails it by far more
// than float64's rounding. The bit trick that makes operands of the
// levels is checked for every level and zero point.
#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include "kernels/int4_weight.h"

namespace ropeserve {
namespace {

std::uint32_t WordOf(const std::uint8_t* bytes) {
  std::uint32_t w;
  std::memcpy(&w, bytes, 4);  // little-endian, as the GPU reads it
  return w;
}

// y [M, N] as the kernel computes it, in float64 (a void function: it asserts).
void ReplayKernel(const Int4MmaWeight& m, const at::Tensor& x /* [M, K] float64, the kernel's column order */,
                  at::Tensor& y) {
  const std::int64_t M = x.size(0), N = m.n, K = m.k, chunks = (K + 63) / 64, units = (K + 127) / 128;
  const auto* levels = m.packed.data_ptr<std::uint8_t>();
  const auto* scale = m.scale.data_ptr<float>();
  const auto* zero = m.zero.data_ptr<std::uint8_t>();
  const auto xa = x.accessor<double, 2>();
  y = at::zeros({M, N}, at::kDouble);
  auto ya = y.accessor<double, 2>();
  const std::int64_t tiles = (M + 15) / 16;
  for (std::int64_t ct = 0; ct < N / 16; ++ct) {
    // Per m-tile, 8-column tile and lane: the group's sums and the totals.
    std::vector<std::array<double, 4>> group(tiles * 2 * 32), total(tiles * 2 * 32);
    for (std::int64_t u = 0; u < units; ++u) {
      for (int half = 0; half < 4; ++half) {
        const std::int64_t kc = 2 * u + half / 2, k0 = u * 128 + 32 * half;
        if (k0 >= K) break;
        ASSERT_LT(kc, chunks);
        const std::int64_t g = k0 / m.group_size;
        for (int wl = 0; wl < 2; ++wl) {
          const int w = 2 * (half % 2) + wl;
          for (std::int64_t mt = 0; mt < tiles; ++mt) {
            for (int j = 0; j < 2; ++j) {
              double A[16][16], B[16][8];
              int seen_a[16][16] = {}, seen_b[16][8] = {};
              for (int lane = 0; lane < 32; ++lane) {
                const int c = lane / 4, t = lane % 4;
                const std::uint32_t word = WordOf(levels + ((ct * chunks + kc) * 32 + lane) * 16 + 4 * w);
                const int z = zero[g * N + 16 * ct + 8 * j + c];
                // B: b0 = (word >> 4 (2j)) at bits 0-3 and 16-19 -> k 2t, 2t + 1;
                // b1 = (word >> 4 (2j + 1)) -> k 2t + 8, 2t + 9; column c.
                for (int h = 0; h < 2; ++h) {
                  const std::uint32_t v = word >> (4 * (2 * j + h));
                  for (int e = 0; e < 2; ++e) {
                    const int kk = 2 * t + 8 * h + e;
                    B[kk][c] = static_cast<double>((v >> (16 * e)) & 15) - z;
                    ++seen_b[kk][c];
                  }
                }
                // A: the lane's x loads (rows 16 mt + c, + 8: eight x from
                // k0 + 8t), word i of a load = x pair 2i, 2i + 1; a[0] =
                // row c word 2wl, a[1] = row c + 8 word 2wl, a[2] = row c
                // word 2wl + 1, a[3] = row c + 8 word 2wl + 1.
                for (int reg = 0; reg < 4; ++reg) {
                  const int rh = reg % 2, word_index = 2 * wl + reg / 2;
                  const std::int64_t row = 16 * mt + 8 * rh + c;
                  for (int e = 0; e < 2; ++e) {
                    const int ar = c + 8 * rh, ak = 2 * t + 8 * (reg / 2) + e;
                    A[ar][ak] = row < M ? xa[row][k0 + 8 * t + 2 * word_index + e] : 0.0;
                    ++seen_a[ar][ak];
                  }
                }
              }
              for (int r = 0; r < 16; ++r)
                for (int kk = 0; kk < 16; ++kk) ASSERT_EQ(seen_a[r][kk], 1) << r << "," << kk;
              for (int kk = 0; kk < 16; ++kk)
                for (int col = 0; col < 8; ++col) ASSERT_EQ(seen_b[kk][col], 1) << kk << "," << col;
              // D += A B, read back through the lanes' accumulators.
              for (int lane = 0; lane < 32; ++lane) {
                for (int e = 0; e < 4; ++e) {
                  const int r = lane / 4 + 8 * (e / 2), col = 2 * (lane % 4) + e % 2;
                  double d = 0;
                  for (int kk = 0; kk < 16; ++kk) d += A[r][kk] * B[kk][col];
                  group[(mt * 2 + j) * 32 + lane][e] += d;
                }
              }
            }
          }
        }
        if ((k0 + 32) % m.group_size == 0) {  // the group's end: scale the lane's columns 2t, 2t + 1
          for (std::int64_t mt = 0; mt < tiles; ++mt) {
            for (int j = 0; j < 2; ++j) {
              for (int lane = 0; lane < 32; ++lane) {
                for (int e = 0; e < 4; ++e) {
                  const double s = scale[g * N + 16 * ct + 8 * j + 2 * (lane % 4) + e % 2];
                  auto& gs = group[(mt * 2 + j) * 32 + lane][e];
                  total[(mt * 2 + j) * 32 + lane][e] += s * gs;
                  gs = 0;
                }
              }
            }
          }
        }
      }
    }
    for (std::int64_t mt = 0; mt < tiles; ++mt) {
      for (int j = 0; j < 2; ++j) {
        for (int lane = 0; lane < 32; ++lane) {
          for (int e = 0; e < 4; ++e) {
            const std::int64_t r = 16 * mt + lane / 4 + 8 * (e / 2);
            const std::int64_t col = 16 * ct + 8 * j + 2 * (lane % 4) + e % 2;
            if (r < M) ya[r][col] = total[(mt * 2 + j) * 32 + lane][e];
          }
        }
      }
    }
  }
}

TEST(Int4MmaLayout, TheKernelsFragmentsMultiplyToTheDequantizedProduct) {
  at::manual_seed(57);
  for (auto [N, K, group, M, symmetric] : {std::tuple<int, int, int, int, bool>{16, 64, 32, 1, false},
                                           {32, 160, 32, 3, true},  // K % 64 == 32: a padded half chunk
                                           {48, 384, 128, 17, false},
                                           {16, 192, 64, 40, false},
                                           {32, 256, 128, 64, true}}) {
    SCOPED_TRACE(::testing::Message() << N << "x" << K << " g" << group << " rows " << M);
    const Int4Weight w = QuantizeInt4(at::randn({N, K}), group, symmetric);
    const Int4MmaWeight m = Int4MmaLayout(w);
    ASSERT_EQ(m.packed.sizes(), (std::vector<std::int64_t>{N / 16, (K + 63) / 64, 32, 16}));
    ASSERT_EQ(m.scale.sizes(), (std::vector<std::int64_t>{K / group, N}));
    ASSERT_EQ(m.zero.sizes(), m.scale.sizes());
    const at::Tensor x = at::randn({M, K}, at::kDouble);
    at::Tensor got;
    ReplayKernel(m, x, got);
    if (HasFatalFailure()) return;
    const at::Tensor want = at::matmul(x, DequantizeInt4(w, at::kDouble).t());
    const double err = (got - want).abs().max().item<double>();
    // float64 sums of <= K terms of |x| |w| <= ~5 * 16 * max scale: 1e-10 is thousands of roundings.
    EXPECT_LT(err, 1e-10 * (1 + want.abs().max().item<double>())) << err;
  }
  EXPECT_THROW(Int4MmaLayout(QuantizeInt4(at::randn({24, 64}), 32)), c10::Error);
}

// (q | 0x4300) read as a bfloat16 is 128 + q, (q | 0x6400) as a float16
// 1024 + q, and 128 + zero / 1024 + zero are exact: their difference is
// q - zero exactly.
TEST(Int4MmaLayout, LevelBitsReadAsBasePlusTheLevel) {
  for (int q = 0; q < 16; ++q) {
    EXPECT_EQ(static_cast<float>(c10::BFloat16(static_cast<std::uint16_t>(0x4300 | q), c10::BFloat16::from_bits())),
              128.0f + q);
    EXPECT_EQ(static_cast<float>(c10::Half(static_cast<std::uint16_t>(0x6400 | q), c10::Half::from_bits())),
              1024.0f + q);
  }
  for (int z = 0; z <= 16; ++z) {
    EXPECT_EQ(static_cast<float>(c10::BFloat16(128.0f + z)), 128.0f + z);
    EXPECT_EQ(static_cast<float>(c10::Half(1024.0f + z)), 1024.0f + z);
  }
}

}  // namespace
}  // namespace ropeserve
