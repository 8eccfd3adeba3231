// The CPU paged-attention kernel against the reference on random inputs:
// block boundaries, GQA ratios 1 to 17, head_dim 16 to 256, contexts 1 to
// 4096, decode rows and prefill chunks in one batch, float32 and bfloat16.
#include "kernels/cpu/paged_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>

#include "kernels/reference/reference_ops.h"
#include "tests/common/float_bounds.h"

namespace ropeserve {
namespace {

struct Case {
  std::int64_t block_size, hkv, group, head_dim;
  std::vector<std::pair<std::int64_t, std::int64_t>> seqs;  // (query_len, context_len)
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "bs" << c.block_size << "_hkv" << c.hkv << "_g" << c.group << "_d" << c.head_dim << "_n" << c.seqs.size();
}

void Check(const Case& c, at::ScalarType dtype, std::uint64_t seed) {
  at::manual_seed(static_cast<std::int64_t>(seed));
  std::mt19937_64 rng(seed);
  const std::int64_t hq = c.hkv * c.group;
  std::int64_t total_blocks = 0, max_blocks = 0, T = 0;
  for (auto [ql, L] : c.seqs) {
    const std::int64_t nb = (L + c.block_size - 1) / c.block_size;
    total_blocks += nb;
    max_blocks = std::max(max_blocks, nb);
    T += ql;
  }
  const std::int64_t num_blocks = total_blocks + 3;
  // Shuffled physical blocks so tables are not contiguous.
  std::vector<std::int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<std::int32_t>> tables;
  at::Tensor table_tensor = at::zeros({static_cast<std::int64_t>(c.seqs.size()), max_blocks}, at::kInt);
  std::vector<std::int64_t> qstart{0}, ctx, qlens;
  size_t next = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    auto [ql, L] = c.seqs[s];
    std::vector<std::int32_t> t;
    for (std::int64_t b = 0; b < (L + c.block_size - 1) / c.block_size; ++b) t.push_back(ids[next++]);
    for (size_t b = 0; b < t.size(); ++b) table_tensor[s][b] = t[b];
    tables.push_back(t);
    qstart.push_back(qstart.back() + ql);
    ctx.push_back(L);
    qlens.push_back(ql);
  }
  at::Tensor q = at::randn({T, hq, c.head_dim}).to(dtype);
  at::Tensor k = at::randn({num_blocks, c.block_size, c.hkv, c.head_dim}).to(dtype);
  at::Tensor v = at::randn({num_blocks, c.block_size, c.hkv, c.head_dim}).to(dtype);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  at::Tensor got =
      cpu::PagedAttention(q, k, v, table_tensor, at::tensor(qstart, at::kLong), at::tensor(ctx, at::kLong), scale);
  // Reference in float32 on the same (possibly bf16-rounded) values.
  at::Tensor want =
      reference::PagedAttention(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), tables, qlens, ctx, scale);
  // float32: the kernel and the reference sum scores over head_dim and
  // probabilities over the context in different orders; the bound follows
  // from the arithmetic (float_bounds.h) on outputs no larger than max|v|.
  // bfloat16 inputs are the same values for both; the kernel rounds its
  // output to bfloat16 (8 bits).
  std::int64_t longest = c.head_dim;
  for (auto [ql, L] : c.seqs) longest = std::max(longest, L);
  const double vmax = v.to(at::kFloat).abs().max().item<double>();
  const double tol = dtype == at::kFloat ? testing::RoundingBound(longest, 1, vmax) : 2 * vmax / 256;
  const double err = (got.to(at::kFloat) - want).abs().max().item<double>();
  EXPECT_LE(err, tol) << "dtype " << dtype;
  EXPECT_FALSE(at::isnan(got.to(at::kFloat)).any().item<bool>());
}

class PagedAttentionKernel : public ::testing::TestWithParam<Case> {};

TEST_P(PagedAttentionKernel, MatchesReferenceFloat32) { Check(GetParam(), at::kFloat, 1); }
TEST_P(PagedAttentionKernel, MatchesReferenceBFloat16) { Check(GetParam(), at::kBFloat16, 2); }

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttentionKernel,
    ::testing::Values(
        Case{16, 2, 1, 64, {{1, 1}}},                                                         // first token
        Case{16, 2, 2, 64, {{1, 16}, {1, 17}, {1, 33}}},                                      // block boundaries
        Case{16, 1, 4, 128, {{5, 5}, {1, 300}, {3, 40}}},                                     // prefill + decode mixed
        Case{8, 2, 8, 64, {{7, 20}, {1, 8}, {1, 9}, {16, 16}}}, Case{1, 4, 1, 64, {{3, 7}}},  // block size 1
        Case{16, 2, 4, 128, {{1, 4096}, {2, 2049}}},                                          // long contexts
        Case{32, 8, 2, 128, {{17, 100}, {1, 1}, {1, 2}}},
        Case{16, 2, 7, 64, {{300, 1000}, {1, 50}, {600, 600}, {16, 40}}},  // GEMM tiles, GQA 7
        // head sizes of the vectorized path's other register shapes, and ones it leaves to the generic path
        Case{16, 1, 3, 16, {{1, 40}, {2, 17}}}, Case{4, 2, 5, 32, {{1, 9}, {15, 30}}},
        Case{16, 1, 2, 256, {{1, 70}, {3, 3}}}, Case{4, 1, 3, 24, {{2, 9}, {1, 5}}},
        Case{16, 1, 17, 64, {{1, 33}}}),  // a group larger than one register chunk of heads
    [](const auto& info) { return "case" + std::to_string(info.index); });

}  // namespace
}  // namespace ropeserve
