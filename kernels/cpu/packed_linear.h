// y = x @ w^T + b in bfloat16 for any number of rows (decode batches and
// prefill), over weights repacked once at load.
//
// Why: past 8 rows LibTorch 1.13 sends bf16 linears to oneDNN's GEMM
// (180-250 GFLOP/s at 32 rows here; 64% of a 16-sequence decode profile),
// and a kernel streaming weight rows in their original layout runs out of
// registers past 8 rows. No Debian package has a bf16
// GEMM for these cores other than oneDNN, so this one is ours.
//
// How: the weights are cut into panels of kPackedPanel output features;
// inside a panel, for each pair of input columns (k, k+1), the panel's
// features sit side by side as (w[n][k], w[n][k+1]) pairs: 64 bytes per 16
// features, exactly what AVX-512-BF16's vdpbf16ps multiplies against a
// broadcast (x[m][k], x[m][k+1]) pair (exact bf16 products, float32 sums).
// A tile of up to kPackedTileRows rows x one panel keeps its sums in
// registers over all of K and reads each panel line once per tile; a panel
// (K x 64 x 2 bytes: 114 KB at K = 896) stays in L2 while the tiles of
// rows pass over it. Threads split the panels. That is the AVX-512-BF16
// variant (packed_linear_avx512.cc); the same panels serve the AVX2 one
// (packed_linear_avx2.cc: widened to float32 in registers, FMA), the AMX
// tiles and the scalar generic one, chosen once through the kernel table
// (kernel_table.h). The oracle in tests: float64 maths on the same bf16
// values, and at::linear on the unpacked weights.
#pragma once

#include <ATen/core/Tensor.h>

namespace ropeserve::cpu {

// Output features per panel (four 16-lane float32 vectors of sums).
constexpr std::int64_t kPackedPanel = 64;
// Rows of x per register tile (6 x 4 sums + 4 weight vectors of the 32
// zmm registers; x pairs are broadcast from memory).
constexpr std::int64_t kPackedTileRows = 6;

// A [N, K] weight in panel order, zero-padded past N and K: bfloat16
// pairs, data [ceil(N / 64), ceil(K / 2), 64, 2] bfloat16; or float32
// (float32 models: the kernels read each panel's lines as they are, no
// widening), data [ceil(N / 64), K, 64] float32. Float32 panels give every
// output as one fma chain over k in every ISA's variant: the same bits on
// every CPU and for every row count.
struct PackedWeight {
  at::Tensor data;
  std::int64_t n = 0, k = 0;
  bool defined() const { return data.defined(); }
  bool is_float32() const { return data.scalar_type() == at::kFloat; }
};

// Whether M rows of K columns run on AMX tiles (packed_linear_amx.cc: the
// same panels, 32 x 32 float32 sums in tile registers): a CPU with
// AMX-BF16 granted to the process (cpu_features.h), M at least the kernel
// configuration's amx_min_rows (0: never), K a multiple of 32. Else the AVX-512
// kernel. (This machine, 2 threads, [9728 x 896] and [896 x 4864]: docs/
// benchmarks.md.)
bool PackedLinearUsesAmx(std::int64_t M, std::int64_t K);
// x [M, K] bfloat16 as the AMX kernel reads it: M rounded up to 32 rows,
// the new rows zero (the panel paths of int8_linear.h / int4_linear.h too).
at::Tensor AmxPaddedRows(const at::Tensor& x);

// Packs w [N, K] (any floating dtype) as `dtype`: bfloat16 (w rounded to
// it) or float32.
PackedWeight PackWeight(const at::Tensor& w, at::ScalarType dtype = at::kBFloat16);
// The [N, K] matrix back in its packed dtype (tests, the reference forward).
at::Tensor UnpackWeight(const PackedWeight& w);
// Rows `ids` [T] int64 of the unpacked matrix as [T, K] in its dtype (a
// tied embedding kept once, packed for the LM head).
at::Tensor PackedRows(const PackedWeight& w, const at::Tensor& ids);

// x [M, K] in the weight's dtype (any M >= 1), bias [N] or undefined;
// returns [M, N] in that dtype: bfloat16 (float32 sums, one rounding) or
// float32, on every CPU.
at::Tensor PackedLinear(const at::Tensor& x, const PackedWeight& w, const at::Tensor& bias);

}  // namespace ropeserve::cpu
