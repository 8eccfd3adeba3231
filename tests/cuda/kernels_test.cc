// kernels/cuda against kernels/reference on random inputs (GPU machines
// only; built when the LibTorch has CUDA). Inputs are fresh every run (the
// seed is printed; ROPESERVE_TEST_SEED replays one), outputs are poisoned with NaN before each kernel, and
// 16-bit results must stay within relative error bounds of a float32
// reference computed from the same rounded inputs.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "kernels/cuda/torch_glue.h"
#include "kernels/int4_weight.h"
#include "kernels/reference/reference_ops.h"
#include "tests/common/float_bounds.h"
#include "tests/common/test_seed.h"

namespace ropeserve {
namespace {

class CudaKernels : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    at::manual_seed(testing::TestSeed());
  }
  at::ScalarType dtype() const { return GetParam(); }
  at::TensorOptions gpu() const { return at::TensorOptions().device(at::kCUDA).dtype(dtype()); }
  at::Tensor Randn(at::IntArrayRef shape) const { return at::randn(shape, gpu()); }
  // max |a - b| / max(max |b|, 1e-6) over float32 copies.
  static double RelError(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor x = a.to(at::kCPU, at::kFloat), y = b.to(at::kCPU, at::kFloat);
    EXPECT_FALSE(x.isnan().any().item<bool>()) << "NaN in the kernel's output (poison left?)";
    return (x - y).abs().max().item<double>() / std::max(y.abs().max().item<double>(), 1e-6);
  }
  double Bound() const { return dtype() == at::kBFloat16 ? 1e-2 : 2e-3; }
};

TEST_P(CudaKernels, ReshapeAndCacheWritesEverySlot) {
  const std::int64_t T = 37, Hkv = 4, D = 64, blocks = 16, bs = 16;
  at::Tensor k = Randn({T, Hkv, D}), v = Randn({T, Hkv, D});
  at::Tensor slots = at::randperm(blocks * bs, at::TensorOptions().dtype(at::kLong)).narrow(0, 0, T).to(at::kCUDA);
  at::Tensor kc = at::full({blocks, bs, Hkv, D}, NAN, gpu()), vc = kc.clone();
  cuda::ReshapeAndCache(k, v, kc, vc, slots);
  at::Tensor kr = at::full({blocks, bs, Hkv, D}, NAN, gpu()), vr = kr.clone();
  reference::WriteKvCache(k, v, kr, vr, slots);
  EXPECT_TRUE(at::equal(kc.view({-1, Hkv, D}).index_select(0, slots), kr.view({-1, Hkv, D}).index_select(0, slots)));
  EXPECT_TRUE(at::equal(kc.view({-1, Hkv, D}).index_select(0, slots), k));
  EXPECT_TRUE(at::equal(vc.view({-1, Hkv, D}).index_select(0, slots), v));
}

TEST_P(CudaKernels, RmsNormAndFusedAddMatchTheReference) {
  for (std::int64_t hidden : {64, 896, 1000, 2048, 4096}) {
    at::Tensor x = Randn({7, hidden}), w = Randn({hidden}), h = Randn({7, hidden});
    EXPECT_LT(RelError(cuda::RmsNorm(x, w, 1e-6), reference::RmsNorm(x.to(at::kFloat), w.to(at::kFloat), 1e-6)),
              Bound())
        << hidden;
    at::Tensor xs = x.clone(), hs = h.clone();
    cuda::FusedAddRmsNorm(xs, hs, w, 1e-6);
    const at::Tensor h_ref = (h + x);  // rounded in the dtype, as h = h + x
    EXPECT_TRUE(at::equal(hs, h_ref)) << hidden;
    EXPECT_LT(RelError(xs, reference::RmsNorm(h_ref.to(at::kFloat), w.to(at::kFloat), 1e-6)), Bound()) << hidden;
  }
}

TEST_P(CudaKernels, SiluAndMulRoundsAsTransformers) {
  for (std::int64_t I : {1, 64, 1000, 4864}) {
    const at::Tensor gate_up = Randn({5, 2 * I}) * 4;
    // act_fn(gate) * up as Hugging Face runs it in the dtype (on the host).
    const at::Tensor g = gate_up.narrow(1, 0, I).cpu(), u = gate_up.narrow(1, I, I).cpu();
    const at::Tensor want = at::silu(g.to(at::kFloat)).to(dtype()) * u;
    const at::Tensor got = cuda::SiluAndMul(gate_up);
    ASSERT_EQ(got.sizes(), (std::vector<std::int64_t>{5, I}));
    // expf differs from the host's exp by an ulp or two: at most one
    // rounding step of the dtype apart, twice.
    EXPECT_LT(RelError(got, want), Bound()) << I;
  }
}

TEST_P(CudaKernels, RopeMatchesRotateHalfIncludingPartialRotary) {
  for (auto [hq, hkv, d, rot] : {std::tuple<int, int, int, int>{8, 8, 64, 64},
                                 {14, 2, 64, 64},
                                 {16, 2, 128, 128},
                                 {8, 1, 128, 64},
                                 {4, 4, 64, 32}}) {
    const std::int64_t T = 19;
    at::Tensor q = Randn({T, hq, d}), k = Randn({T, hkv, d});
    at::Tensor pos = at::randint(0, 4096, {T}, at::TensorOptions().dtype(at::kLong));
    at::Tensor inv = at::pow(10000.0, -at::arange(0, rot, 2, at::kDouble) / rot).to(at::kFloat);
    auto [cos, sin] = reference::RopeCosSin(inv, pos, 1.0, at::kFloat);  // [T, rot] duplicated halves
    at::Tensor all = at::arange(4096, at::kLong);
    auto [cos_all, sin_all] = reference::RopeCosSin(inv, all, 1.0, at::kFloat);
    at::Tensor table =
        at::cat({cos_all.narrow(1, 0, rot / 2), sin_all.narrow(1, 0, rot / 2)}, 1).contiguous().to(at::kCUDA);
    at::Tensor q_ref = reference::ApplyRope(q.to(at::kFloat).cpu(), cos, sin);
    at::Tensor k_ref = reference::ApplyRope(k.to(at::kFloat).cpu(), cos, sin);
    at::Tensor qg = q.clone(), kg = k.clone();
    cuda::RotaryEmbedding(pos.to(at::kCUDA), qg, kg, table);
    EXPECT_LT(RelError(qg, q_ref), Bound()) << hq << " " << d << " " << rot;
    EXPECT_LT(RelError(kg, k_ref), Bound()) << hkv << " " << d << " " << rot;
  }
}

// The decoder hands RoPE and the cache write views of the qkv projection
// (rows strided, each row's heads contiguous): the same results as on
// contiguous copies, the values columns left as they were.
TEST_P(CudaKernels, RopeAndCacheWriteTakeTheQkvProjectionsViews) {
  const std::int64_t T = 23, hq = 14, hkv = 2, D = 64, blocks = 8, bs = 16;
  at::Tensor qkv = Randn({T, (hq + 2 * hkv) * D});
  const at::Tensor before = qkv.clone();
  at::Tensor q = qkv.narrow(1, 0, hq * D).view({T, hq, D});
  at::Tensor k = qkv.narrow(1, hq * D, hkv * D).view({T, hkv, D});
  const at::Tensor v = qkv.narrow(1, (hq + hkv) * D, hkv * D).view({T, hkv, D});
  at::Tensor qc = q.contiguous(), kc = k.contiguous();
  const at::Tensor pos = at::randint(0, 512, {T}, at::TensorOptions().dtype(at::kLong)).to(at::kCUDA);
  const at::Tensor table = at::rand({512, D}, gpu().dtype(at::kFloat));
  cuda::RotaryEmbedding(pos, q, k, table);
  cuda::RotaryEmbedding(pos, qc, kc, table);
  EXPECT_TRUE(at::equal(q, qc));
  EXPECT_TRUE(at::equal(k, kc));
  EXPECT_TRUE(at::equal(v, before.narrow(1, (hq + hkv) * D, hkv * D).view({T, hkv, D})));
  const at::Tensor slots =
      at::randperm(blocks * bs, at::TensorOptions().dtype(at::kLong)).narrow(0, 0, T).to(at::kCUDA);
  at::Tensor k_cache = at::zeros({blocks, bs, hkv, D}, gpu()), v_cache = k_cache.clone();
  at::Tensor k_want = k_cache.clone(), v_want = k_cache.clone();
  cuda::ReshapeAndCache(k, v, k_cache, v_cache, slots);
  cuda::ReshapeAndCache(kc, v.contiguous(), k_want, v_want, slots);
  EXPECT_TRUE(at::equal(k_cache, k_want));
  EXPECT_TRUE(at::equal(v_cache, v_want));
}

// The fused RoPE + cache write gives the bits of RotaryEmbedding then
// ReshapeAndCache, on views of a qkv projection, with partial rotary dims
// and padding rows (slot -1: nothing cached); k is left unrotated.
TEST_P(CudaKernels, RopeAndCacheEqualsRopeThenCacheWrite) {
  const std::int64_t T = 29, hq = 14, hkv = 2, D = 64, blocks = 8, bs = 16;
  for (std::int64_t rotary : {D, D / 2}) {
    const at::Tensor qkv = Randn({T, (hq + 2 * hkv) * D});
    auto views = [&](const at::Tensor& t) {
      return std::tuple{t.narrow(1, 0, hq * D).view({T, hq, D}), t.narrow(1, hq * D, hkv * D).view({T, hkv, D}),
                        t.narrow(1, (hq + hkv) * D, hkv * D).view({T, hkv, D})};
    };
    at::Tensor fused = qkv.clone(), split = qkv.clone();
    auto [q, k, v] = views(fused);
    auto [qs, ks, vs] = views(split);
    const at::Tensor pos = at::randint(0, 512, {T}, at::TensorOptions().dtype(at::kLong)).to(at::kCUDA);
    const at::Tensor table = at::rand({512, rotary}, gpu().dtype(at::kFloat));
    at::Tensor slots = at::randperm(blocks * bs, at::TensorOptions().dtype(at::kLong)).narrow(0, 0, T);
    slots[3] = -1;  // padding rows
    slots[T - 1] = -1;
    slots = slots.to(at::kCUDA);
    at::Tensor k_cache = at::full({blocks, bs, hkv, D}, 7.0, gpu()), v_cache = k_cache.clone();
    at::Tensor k_want = k_cache.clone(), v_want = k_cache.clone();
    cuda::RopeAndCache(pos, q, k, v, k_cache, v_cache, slots, table);
    cuda::RotaryEmbedding(pos, qs, ks, table);
    cuda::ReshapeAndCache(ks, vs, k_want, v_want, slots);
    EXPECT_TRUE(at::equal(q, qs)) << "rotary " << rotary;
    EXPECT_TRUE(at::equal(k_cache, k_want)) << "rotary " << rotary;
    EXPECT_TRUE(at::equal(v_cache, v_want)) << "rotary " << rotary;
    EXPECT_TRUE(at::equal(k, std::get<1>(views(qkv)))) << "k is left as it was";
  }
}

// Decode rows and prefill-chunk rows against the gather-based reference.
TEST_P(CudaKernels, PagedAttentionMatchesTheReferenceAcrossShapes) {
  const std::int64_t bs = 16;
  // The vector kernel (head_dim 64 / 128 / 256; GQA groups of 1, 2, 4, 7,
  // 8, 16 and 20 query heads, the last two in blocks of 8, a group of 3 in
  // a block shaped for 4), the tensor-core one (head_dim 64 / 128; groups
  // in blocks of 16: 20 takes 16 + 4) and the generic one (head_dim 96).
  for (auto [hq, hkv, d] : {std::tuple<int, int, int>{8, 8, 64},
                            {8, 4, 64},
                            {16, 4, 128},
                            {32, 4, 128},
                            {14, 2, 64},
                            {16, 1, 64},
                            {20, 1, 64},
                            {32, 2, 128},
                            {6, 2, 256},
                            {12, 4, 96}}) {
    // Sequences: (context length, query rows): decodes across block and
    // partition boundaries (512) and prefill chunks with a cached prefix.
    const std::vector<std::pair<std::int64_t, std::int64_t>> seqs = {{1, 1},    {17, 1},   {511, 1}, {513, 1},
                                                                     {2100, 1}, {4096, 1}, {40, 40}, {700, 37}};
    std::int64_t max_blocks = 0, total_blocks = 0, rows = 0;
    for (auto [c, n] : seqs) {
      max_blocks = std::max(max_blocks, (c + bs - 1) / bs);
      total_blocks += (c + bs - 1) / bs;
      rows += n;
    }
    at::Tensor kc = Randn({total_blocks, bs, hkv, d}), vc = Randn({total_blocks, bs, hkv, d});
    at::Tensor perm = at::randperm(total_blocks, at::TensorOptions().dtype(at::kInt));
    std::vector<std::vector<std::int32_t>> tables;
    std::vector<std::int64_t> qlens, clens;
    at::Tensor bt =
        at::zeros({static_cast<std::int64_t>(seqs.size()), max_blocks}, at::TensorOptions().dtype(at::kInt));
    std::int64_t next = 0;
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      auto [c, n] = seqs[s];
      std::vector<std::int32_t> t;
      for (std::int64_t b = 0; b < (c + bs - 1) / bs; ++b) {
        t.push_back(perm[next++].item<std::int32_t>());
        bt[static_cast<std::int64_t>(s)][b] = t.back();
      }
      tables.push_back(t);
      qlens.push_back(n);
      clens.push_back(c);
    }
    // q as the decoder hands it over (a view of the qkv projection's rows)
    // and as a contiguous copy: the same bits.
    const at::Tensor q_view = Randn({rows, (hq + 2 * hkv) * d}).narrow(1, 0, hq * d).view({rows, hq, d});
    const at::Tensor q = q_view.contiguous();
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    at::Tensor ref = reference::PagedAttention(q.to(at::kFloat).cpu(), kc.to(at::kFloat).cpu(), vc.to(at::kFloat).cpu(),
                                               tables, qlens, clens, scale);
    std::vector<std::int64_t> starts{0};
    for (const std::int64_t n : qlens) starts.push_back(starts.back() + n);
    auto i64 = [](const std::vector<std::int64_t>& v) { return at::tensor(v, at::kLong).to(at::kCUDA); };
    for (auto kernel : {cuda::AttentionKernel::kAuto, cuda::AttentionKernel::kVector4, cuda::AttentionKernel::kGeneric,
                        cuda::AttentionKernel::kMma}) {
      for (std::int64_t partition : {512, 64}) {
        // 4096 is the longest context; a larger bound (a captured graph's)
        // only adds blocks that exit at once.
        for (std::int64_t bound : {std::int64_t{4096}, std::int64_t{3 * 4096}}) {
          // One workspace for both calls: the first must leave its
          // partition counters zero for the second (as graph replays do).
          const at::Tensor ws = cuda::PagedAttentionWorkspace(rows, hq, d, bound, q.options(), partition);
          at::Tensor out = cuda::PagedAttention(q, kc, vc, bt.to(at::kCUDA), i64(starts), i64(clens), bound, scale, ws,
                                                partition, kernel);
          EXPECT_LT(RelError(out, ref), Bound())
              << hq << "/" << hkv << " d" << d << " partition " << partition << " kernel " << static_cast<int>(kernel);
          EXPECT_TRUE(at::equal(out, cuda::PagedAttention(q_view, kc, vc, bt.to(at::kCUDA), i64(starts), i64(clens),
                                                          bound, scale, ws, partition, kernel)))
              << "q as a view: " << hq << "/" << hkv << " d" << d << " kernel " << static_cast<int>(kernel);
          const at::Tensor counters = ws.narrow(0, ws.numel() - rows * hq, rows * hq).view(at::kInt);
          EXPECT_EQ(counters.count_nonzero().item<std::int64_t>(), 0) << "counters left set";
        }
      }
    }
  }
}

// The row summary against LibTorch's max(1) and logsumexp(1), with ties
// (lowest id), -inf entries, a row of -inf, +inf and NaN rows.
TEST(CudaLogitsSummary, MatchesLibTorchMaxAndLogsumexp) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const std::int64_t V = 151936;
  at::Tensor logits = at::randn({7, V}, at::TensorOptions().device(at::kCUDA)) * 4;
  logits[1].fill_(2.5f);                           // ties everywhere: id 0
  logits[2].narrow(0, 0, V / 2).fill_(-INFINITY);  // half -inf
  logits[3].fill_(-INFINITY);                      // -inf: -inf, id 0
  logits[4][77] = INFINITY;                        // +inf
  logits[5][1000] = NAN;                           // NaN ranks first
  logits[5][2000] = NAN;
  logits[6][V - 1] = 1000.f;  // the max at the end
  auto [lse, max, argmax] = cuda::SummarizeRows(logits);
  auto [ref_max, ref_argmax] = logits.max(1);
  const at::Tensor ref_lse = at::logsumexp(logits, 1);
  const at::Tensor m = max.cpu(), rm = ref_max.cpu(), l = lse.cpu(), rl = ref_lse.cpu();
  const at::Tensor a = argmax.cpu(), ra = ref_argmax.cpu();
  for (std::int64_t r = 0; r < 7; ++r) {
    const float mv = m[r].item<float>(), rmv = rm[r].item<float>();
    EXPECT_TRUE(mv == rmv || (std::isnan(mv) && std::isnan(rmv))) << "row " << r << ": " << mv << " vs " << rmv;
    // Rows 1 and 3 tie everywhere, row 5 holds two NaNs: the lowest id
    // (LibTorch's own choice among ties is not specified on a GPU).
    const std::int64_t want = r == 1 || r == 3 ? 0 : r == 5 ? 1000 : ra[r].item<std::int64_t>();
    EXPECT_EQ(a[r].item<std::int64_t>(), want) << "row " << r;
    const float lv = l[r].item<float>(), rlv = rl[r].item<float>();
    if (std::isfinite(rlv)) {
      // float32 exponentials (__expf, a few ulp) summed by the block: well
      // within 2^-16 of the row's logsumexp, plus one rounding of it.
      EXPECT_NEAR(lv, rlv, std::ldexp(1.0, -16) * (1 + std::abs(rlv))) << "row " << r;
    } else {
      EXPECT_TRUE(lv == rlv || (std::isnan(lv) && std::isnan(rlv))) << "row " << r << ": " << lv << " vs " << rlv;
    }
  }
  EXPECT_EQ(a[6].item<std::int64_t>(), V - 1);
  // The packed form (the sampler's one copy for greedy rows): the same
  // numbers' bits, then max again as the chosen logit, then the argmax as
  // int32; logsumexp and max are views of it.
  auto [plse, pmax, pargmax, packed] = cuda::SummarizeRowsPacked(logits);
  const at::Tensor bits = packed.cpu();
  ASSERT_EQ(bits.numel(), 4 * 7);
  EXPECT_TRUE(at::equal(bits.narrow(0, 0, 7), lse.cpu().view(at::kInt)));
  EXPECT_TRUE(at::equal(bits.narrow(0, 7, 7), m.view(at::kInt)));
  EXPECT_TRUE(at::equal(bits.narrow(0, 14, 7), m.view(at::kInt)));
  EXPECT_TRUE(at::equal(bits.narrow(0, 21, 7), a.to(at::kInt)));
  EXPECT_TRUE(at::equal(pargmax.cpu(), a));
  EXPECT_EQ(plse.data_ptr(), packed.data_ptr());
  EXPECT_EQ(pmax.data_ptr<float>(), plse.data_ptr<float>() + 7);
}

// Finer partitions for few rows; the workspace for a number of rows holds
// what any fewer rows need at their partitions (the decode graphs' pool is
// measured at the largest bucket), though that need is not monotone.
TEST(CudaPartitionSize, FinerForFewRowsAndTheWorkspaceBoundsFewerRows) {
  EXPECT_EQ(cuda::PartitionSizeForRows(1), 64);
  EXPECT_EQ(cuda::PartitionSizeForRows(8), 64);
  EXPECT_EQ(cuda::PartitionSizeForRows(9), 128);
  EXPECT_EQ(cuda::PartitionSizeForRows(64), 512);
  EXPECT_EQ(cuda::PartitionSizeForRows(4096), cuda::kPartitionSize);
  const std::int64_t heads = 14, dim = 64;
  auto need = [&](std::int64_t r, std::int64_t context) {
    return cuda::PagedAttentionWorkspaceBytes(r, heads, dim, context, cuda::PartitionSizeForRows(r));
  };
  EXPECT_GT(need(8, 32768), need(9, 32768));  // why the envelope
  for (std::int64_t context : {100, 300, 4096, 32768}) {
    std::int64_t most = 0;
    for (std::int64_t rows = 1; rows <= 512; ++rows) {
      most = std::max(most, need(rows, context));
      EXPECT_EQ(cuda::PartitionedAttentionWorkspaceBytes(rows, heads, dim, context), most)
          << rows << " rows, context " << context;
    }
  }
}

TEST_P(CudaKernels, SamplingIsGreedyFilteredAndSeeded) {
  if (dtype() != at::kBFloat16) GTEST_SKIP() << "float32 logits: one dtype is enough";
  const std::int64_t R = 6, V = 151936;
  at::Tensor logits = at::randn({R, V}, at::TensorOptions().device(at::kCUDA)) * 3;
  auto col = [&](auto value, at::ScalarType t) {
    return at::full({R}, value, at::TensorOptions().device(at::kCUDA).dtype(t));
  };
  at::Tensor seed = at::arange(R, at::TensorOptions().device(at::kCUDA).dtype(at::kLong)) + 7;
  at::Tensor offset = col(0, at::kLong);
  at::Tensor argmax = logits.argmax(1);
  // Greedy, and top_k = 1 at any temperature.
  EXPECT_TRUE(at::equal(cuda::SampleRows(logits, col(0.0f, at::kFloat), col(0, at::kInt), col(1.0f, at::kFloat),
                                         col(0.0f, at::kFloat), seed, offset),
                        argmax));
  EXPECT_TRUE(at::equal(cuda::SampleRows(logits, col(1.0f, at::kFloat), col(1, at::kInt), col(1.0f, at::kFloat),
                                         col(0.0f, at::kFloat), seed, offset),
                        argmax));
  // top_k = 5: always among the five most likely; seeded draws repeat, and a
  // row's draw does not depend on the other rows.
  at::Tensor top5 = std::get<1>(logits.topk(5, 1));
  at::Tensor a = cuda::SampleRows(logits, col(1.0f, at::kFloat), col(5, at::kInt), col(1.0f, at::kFloat),
                                  col(0.0f, at::kFloat), seed, offset);
  EXPECT_TRUE((top5 == a.unsqueeze(1)).any(1).all().item<bool>());
  at::Tensor b = cuda::SampleRows(logits.narrow(0, 2, 1), col(1.0f, at::kFloat).narrow(0, 0, 1),
                                  col(5, at::kInt).narrow(0, 0, 1), col(1.0f, at::kFloat).narrow(0, 0, 1),
                                  col(0.0f, at::kFloat).narrow(0, 0, 1), seed.narrow(0, 2, 1), offset.narrow(0, 0, 1));
  EXPECT_EQ(a[2].item<std::int64_t>(), b[0].item<std::int64_t>());
  // Frequencies follow softmax(logits / T) on a small vocabulary.
  at::Tensor small = at::tensor({0.0f, 1.0f, 2.0f}).to(at::kCUDA).unsqueeze(0).repeat({4096, 1});
  auto c4 = [&](auto value, at::ScalarType t) {
    return at::full({4096}, value, at::TensorOptions().device(at::kCUDA).dtype(t));
  };
  at::Tensor draws =
      cuda::SampleRows(small, c4(2.0f, at::kFloat), c4(0, at::kInt), c4(1.0f, at::kFloat), c4(0.0f, at::kFloat),
                       at::arange(4096, at::TensorOptions().device(at::kCUDA).dtype(at::kLong)), c4(0, at::kLong));
  const double z = 1 + std::exp(0.5) + std::exp(1.0);
  EXPECT_NEAR((draws == 2).sum().item<double>() / 4096, std::exp(1.0) / z, 0.04);
  // min_p = 0.9 keeps only the most likely of these.
  at::Tensor minp =
      cuda::SampleRows(small, c4(2.0f, at::kFloat), c4(0, at::kInt), c4(1.0f, at::kFloat), c4(0.9f, at::kFloat),
                       at::arange(4096, at::TensorOptions().device(at::kCUDA).dtype(at::kLong)), c4(0, at::kLong));
  EXPECT_TRUE((minp == 2).all().item<bool>());
}

// A 4-bit weight made on the host (kernels/int4_weight.h): round to
// nearest per group, asymmetric or symmetric, optionally with its columns
// permuted (act-order checkpoints).
Int4Weight HostInt4(std::int64_t N, std::int64_t K, std::int64_t group, bool symmetric, bool permuted) {
  const Int4Weight q = QuantizeInt4(at::randn({N, K}), group, symmetric);
  if (!permuted) return q;
  return PackInt4(UnpackInt4(q), q.scale, q.zero, group, at::randperm(K, at::kLong));
}

using Int4Shape = std::tuple<int, int, int, bool, bool, bool>;  // N, K, group, symmetric, permuted, bias

// A 4-bit kernel against float64 maths on the dequantized weights, for
// each shape and row count: `prepare` makes the kernel's weight (with a
// perm member) from the host's, `kernel(xk, w, K, group, bias)` runs it on
// x in the weight's column order. Bound: each term through at most K + 40
// float32 operations at `f32_unit` each, then one rounding to the dtype.
// Each row as it comes out alone must be the same bits.
template <typename Prepare, typename Kernel>
void CheckInt4Kernel(at::ScalarType dtype, std::initializer_list<Int4Shape> shapes, std::initializer_list<int> rows,
                     double f32_unit, Prepare prepare, Kernel kernel) {
  const double u = dtype == at::kBFloat16 ? testing::kBF16Roundoff : 0x1p-11;
  for (auto [N, K, group, symmetric, permuted, with_bias] : shapes) {
    const Int4Weight host = HostInt4(N, K, group, symmetric, permuted);
    const auto w = prepare(host);
    const at::Tensor dense = DequantizeInt4(host, at::kDouble);  // [N, K], the checkpoint's columns
    const at::Tensor bias = with_bias ? at::randn({N}) : at::Tensor();
    const at::Tensor bias_gpu = with_bias ? bias.to(at::kCUDA) : at::Tensor();
    for (int M : rows) {
      SCOPED_TRACE(::testing::Message() << N << "x" << K << " g" << group << " rows " << M);
      const at::Tensor x = at::randn({M, K}, at::TensorOptions().device(at::kCUDA).dtype(dtype));
      const at::Tensor xk = w.perm.defined() ? x.index_select(1, w.perm) : x;
      const at::Tensor y = kernel(xk, w, K, group, bias_gpu);
      ASSERT_EQ(y.sizes(), (std::vector<std::int64_t>{M, N}));
      ASSERT_EQ(y.scalar_type(), dtype);
      const at::Tensor xd = x.to(at::kCPU, at::kDouble);
      at::Tensor ref = at::matmul(xd, dense.t());
      if (with_bias) ref = ref + bias.to(at::kDouble);
      at::Tensor mass = at::matmul(xd.abs(), dense.abs().t());
      if (with_bias) mass = mass + bias.to(at::kDouble).abs();
      const at::Tensor bound = (1 + u) * testing::Gamma(K + 40, f32_unit) * mass + u * ref.abs();
      const at::Tensor err = (y.to(at::kCPU, at::kDouble) - ref).abs();
      EXPECT_FALSE(err.isnan().any().item<bool>());
      EXPECT_TRUE((err <= bound).all().item<bool>()) << (err / bound).max().item<double>();
      if (M > 1) {
        const at::Tensor alone = kernel(xk.narrow(0, M - 1, 1).contiguous(), w, K, group, bias_gpu);
        EXPECT_TRUE(at::equal(alone, y.narrow(0, M - 1, 1)));
      }
    }
  }
}

// The 4-bit matrix-vector kernel, 1-16 rows, odd shapes (K % 64 == 32: a
// padded last block; group 64 and 128 too), every group size, zero points,
// permuted columns and biases. Its float32 operations: 16-term dot, scale,
// the lane's running sum, the 5-level butterfly, bias.
TEST_P(CudaKernels, Int4LinearMatchesFloat64OnTheDequantizedWeights) {
  CheckInt4Kernel(
      dtype(),
      {Int4Shape{45, 64, 32, false, false, true},
       {130, 160, 32, true, true, true},
       {896, 896, 128, false, false, false},
       {257, 1056, 32, false, true, false},
       {64, 4864, 128, true, false, true}},
      {1, 2, 3, 5, 8, 11, 16}, testing::kF32Roundoff, [](const Int4Weight& h) { return Int4WeightOn(h, at::kCUDA); },
      [](const at::Tensor& x, const Int4Weight& w, int K, int group, const at::Tensor& bias) {
        return cuda::Int4Linear(x, w.packed, w.scale, w.zero, K, group, bias);
      });
  // Past the kernel's rows, and a K it cannot take: refused.
  const Int4Weight w = Int4WeightOn(HostInt4(64, 128, 32, false, false), at::kCUDA);
  EXPECT_THROW(cuda::Int4Linear(Randn({cuda::kInt4GemvMaxRows + 1, 128}), w.packed, w.scale, w.zero, 128, 32, {}),
               c10::Error);
  EXPECT_THROW(cuda::Int4Linear(Randn({1, 96}), w.packed, w.scale, w.zero, 96, 32, {}), c10::Error);
}

// The tensor-core 4-bit kernel (Int4MmaLinear, Int4MmaLayout's order), 1-64
// rows (one to four 16-row tiles, partial ones), the same kinds of shapes
// with N a multiple of 16. The products x (q - zero) are exact in float32;
// its float32 operations (the mma's sums, the scale, the group and warp
// sums, the bias) counted at twice the unit roundoff: tensor cores may
// truncate their sums.
TEST_P(CudaKernels, Int4MmaLinearMatchesFloat64OnTheDequantizedWeights) {
  CheckInt4Kernel(
      dtype(),
      {Int4Shape{16, 64, 32, false, false, true},
       {144, 160, 32, true, true, true},
       {896, 896, 128, false, false, false},
       {256, 1056, 32, false, true, false},
       {64, 4864, 128, true, false, true},
       {48, 448, 64, false, false, true}},
      {1, 2, 7, 9, 16, 17, 33, 48, 49, 64}, 2 * testing::kF32Roundoff,
      [](const Int4Weight& h) { return Int4MmaLayout(Int4WeightOn(h, at::kCUDA)); },
      [](const at::Tensor& x, const Int4MmaWeight& w, int K, int group, const at::Tensor& bias) {
        return cuda::Int4MmaLinear(x, w.packed, w.scale, w.zero, K, group, bias);
      });
  // Past its rows, a K it cannot take, the other kernel's layout: refused.
  const Int4MmaWeight w = Int4MmaLayout(Int4WeightOn(HostInt4(64, 128, 32, false, false), at::kCUDA));
  EXPECT_THROW(cuda::Int4MmaLinear(Randn({cuda::kInt4MmaMaxRows + 1, 128}), w.packed, w.scale, w.zero, 128, 32, {}),
               c10::Error);
  EXPECT_THROW(cuda::Int4MmaLinear(Randn({1, 96}), w.packed, w.scale, w.zero, 96, 32, {}), c10::Error);
  const Int4Weight plain = Int4WeightOn(HostInt4(64, 128, 32, false, false), at::kCUDA);
  EXPECT_THROW(cuda::Int4MmaLinear(Randn({1, 128}), plain.packed, plain.scale, plain.zero, 128, 32, {}), c10::Error);
}

// Figures for scripts/gpu-check (c): bytes of K/V a decode step must read,
// per second, against the device-to-device copy bandwidth of this run.
TEST_P(CudaKernels, DISABLED_Bandwidth) {
  if (dtype() != at::kBFloat16) GTEST_SKIP();
  auto sync = [] { c10::cuda::getCurrentCUDAStream().synchronize(); };
  auto seconds = [&](auto fn, int reps) {
    fn();
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) fn();
    sync();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  at::Tensor a = at::empty({1LL << 29}, gpu()), b = at::empty_like(a);  // 1 GiB each
  const double copy = 2.0 * static_cast<double>(a.nbytes()) / seconds([&] { b.copy_(a); }, 20) / 1e9;
  std::printf("BANDWIDTH device copy (read + write): %.0f GB/s\n", copy);
  for (auto [seqs, ctx, hq, hkv, d] : {std::tuple<int, int, int, int, int>{64, 4096, 14, 2, 64},
                                       {256, 1024, 14, 2, 64},
                                       {64, 4096, 32, 8, 64},
                                       {64, 4096, 32, 4, 128},
                                       {256, 1024, 32, 8, 128},
                                       {8, 32768, 14, 2, 64}}) {
    const std::int64_t bs = 16, blocks_per = ctx / bs, blocks = seqs * blocks_per;
    at::Tensor kc = Randn({blocks, bs, hkv, d}), vc = Randn({blocks, bs, hkv, d});
    at::Tensor bt = at::arange(blocks, at::TensorOptions().device(at::kCUDA).dtype(at::kInt)).view({seqs, blocks_per});
    at::Tensor starts = at::arange(seqs + 1, at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
    at::Tensor lens = at::full({seqs}, ctx, at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
    at::Tensor q = Randn({seqs, hq, d});
    at::Tensor ws = cuda::PagedAttentionWorkspace(seqs, hq, d, ctx, q.options());
    for (auto [kernel, name] :
         {std::pair{cuda::AttentionKernel::kAuto, "auto"}, std::pair{cuda::AttentionKernel::kVector4, "vector4"},
          std::pair{cuda::AttentionKernel::kMma, "mma"}}) {
      const double s =
          seconds([&] { cuda::PagedAttention(q, kc, vc, bt, starts, lens, ctx, 0.125, ws, 512, kernel); }, 10);
      const double gbs = 2.0 * static_cast<double>(kc.nbytes()) / s / 1e9;
      std::printf(
          "BANDWIDTH paged attention (%s) decode %d seqs x %d ctx, %d/%d heads, d%d: %.0f GB/s (%.0f%% of copy)\n",
          name, seqs, ctx, hq, hkv, d, gbs, 100.0 * gbs / copy);
    }
  }
  // The 4-bit kernels: bytes of packed weights, scales and zeros read per
  // second, the matrix-vector kernel (to 16 rows) and the tensor-core one
  // (to 64) against what the op set runs past 16 rows today (the weights
  // dequantized, then cuBLAS) and a bf16 cuBLAS GEMM of the same shape
  // (its 2 bytes a weight).
  for (auto [N, K] : {std::pair<int, int>{4864 * 2, 896}, {896, 4864}, {28672, 4096}, {4096, 14336}}) {
    const Int4Weight w = Int4WeightOn(HostInt4(N, K, 128, false, false), at::kCUDA);
    const Int4MmaWeight wm = Int4MmaLayout(w);
    const at::Tensor dense = Randn({N, K});
    const double bytes = static_cast<double>(w.packed.nbytes() + w.scale.nbytes() + w.zero.nbytes());
    for (int M : {1, 8, 16, 32, 64}) {
      const at::Tensor x = Randn({M, K});
      const double sm = seconds([&] { cuda::Int4MmaLinear(x, wm.packed, wm.scale, wm.zero, K, 128, {}); }, 50);
      const double sq = seconds([&] { Int4DequantizedLinear(x, w, {}); }, 20);
      const double sd = seconds([&] { at::linear(x, dense); }, 50);
      char gemv[96] = "-";
      if (M <= cuda::kInt4GemvMaxRows) {
        const double s = seconds([&] { cuda::Int4Linear(x, w.packed, w.scale, w.zero, K, 128, {}); }, 50);
        std::snprintf(gemv, sizeof gemv, "%.1f us, %.0f GB/s (%.0f%% of copy)", s * 1e6, bytes / s / 1e9,
                      100.0 * bytes / s / 1e9 / copy);
      }
      std::printf(
          "BANDWIDTH int4 %d x %d, %d rows: mma %.1f us, %.0f GB/s (%.0f%% of copy); gemv %s; dequantize + cuBLAS "
          "%.1f us; bf16 cuBLAS %.1f us\n",
          N, K, M, sm * 1e6, bytes / sm / 1e9, 100.0 * bytes / sm / 1e9 / copy, gemv, sq * 1e6, sd * 1e6);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaKernels, ::testing::Values(at::kBFloat16, at::kHalf));

}  // namespace
}  // namespace ropeserve
