// GPTQ, AWQ and compressed-tensors 4-bit checkpoints (written by
// `make-model --int4-format` in each format's layout) load with exactly
// the weights their files hold: each projection is decoded here a second
// way, straight from the documented bit layout
// (server/checkpoint/int4_checkpoint.h), and compared with the loaded
// model's dequantized weights; those are the float checkpoint's (same
// seed) within the quantization step; and the serving path computes the
// reference forward on them within the activations' rounding.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/int4_weight.h"
#include "server/checkpoint/checkpoint.h"
#include "server/models/decoder.h"
#include "server/models/decoder_weights.h"
#include "server/models/weight_loader.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/common/float_bounds.h"
#include "tests/models/reference_decoder.h"

namespace ropeserve {
namespace {

using testing::ScratchDir;

struct Int4Case {
  const char* name;
  const char* arch;
  Int4Format format;
  std::int64_t group;
  bool symmetric, act_order, v1;
  std::int64_t hidden = 64, intermediate = 192, heads = 4;
};

void PrintTo(const Int4Case& c, std::ostream* os) { *os << c.name; }

at::Tensor Raw(const Checkpoint& ckpt, const std::string& name) {
  return LoadTensor(ckpt, name, at::kLong);  // integers widened; scales read separately
}

// Value `which` (0-7, bits 4 which ..) of every word.
at::Tensor Nibble(const at::Tensor& words, const at::Tensor& which) {
  return at::bitwise_and(at::bitwise_right_shift(words, which * 4), 15).to(at::kDouble);
}

// Projection `m` [n, k] decoded from the file in float64, the second way:
// one shift per element from its index, as the layout states it.
at::Tensor Decode(const Checkpoint& ckpt, const Int4Case& c, const std::string& m, std::int64_t n, std::int64_t k) {
  const at::Tensor col = at::arange(k, at::kLong), row = at::arange(n, at::kLong);
  at::Tensor q, z, s, g;  // q [n, k], z and s [n, groups], g [k]
  const std::int64_t groups = c.group < 0 ? 1 : k / c.group;
  g = at::div(col, k / groups, "floor");
  if (c.format == Int4Format::kGptq) {
    const at::Tensor qw = Raw(ckpt, m + ".qweight");  // [k / 8, n]
    q = Nibble(qw.index_select(0, at::div(col, 8, "floor")), at::remainder(col, 8).unsqueeze(1)).t();
    const at::Tensor qz = Raw(ckpt, m + ".qzeros");  // [groups, n / 8]
    z = Nibble(qz.index_select(1, at::div(row, 8, "floor")), at::remainder(row, 8)).t() + (c.v1 ? 1 : 0);
    s = LoadTensor(ckpt, m + ".scales", at::kDouble).t();
    g = Raw(ckpt, m + ".g_idx");
  } else if (c.format == Int4Format::kAwq) {
    // Value i of word w holds output 8 w + order[i].
    const std::vector<std::int64_t> order = {0, 2, 4, 6, 1, 3, 5, 7};
    std::vector<std::int64_t> value_of(8);
    for (int i = 0; i < 8; ++i) value_of[order[i]] = i;
    const at::Tensor which = at::tensor(value_of, at::kLong).index_select(0, at::remainder(row, 8));
    const at::Tensor qw = Raw(ckpt, m + ".qweight");  // [k, n / 8]
    q = Nibble(qw.index_select(1, at::div(row, 8, "floor")), which).t();
    const at::Tensor qz = Raw(ckpt, m + ".qzeros");
    z = Nibble(qz.index_select(1, at::div(row, 8, "floor")), which).t();
    s = LoadTensor(ckpt, m + ".scales", at::kDouble).t();
  } else {
    const at::Tensor wp = Raw(ckpt, m + ".weight_packed");                                // [n, ceil(k / 8)]
    q = Nibble(wp.index_select(1, at::div(col, 8, "floor")), at::remainder(col, 8)) - 8;  // signed
    if (c.symmetric) {
      z = at::zeros({n, groups}, at::kDouble);
    } else {
      const at::Tensor zp = Raw(ckpt, m + ".weight_zero_point");  // [ceil(n / 8), groups]
      z = Nibble(zp.index_select(0, at::div(row, 8, "floor")), at::remainder(row, 8).unsqueeze(1)) - 8;
    }
    s = LoadTensor(ckpt, m + ".weight_scale", at::kDouble);
    if (c.act_order) g = Raw(ckpt, m + ".weight_g_idx");
    EXPECT_TRUE(at::equal(Raw(ckpt, m + ".weight_shape"), at::tensor({n, k}, at::kLong)));
  }
  return (q - z.index_select(1, g)) * s.index_select(1, g);
}

class Int4Checkpoints : public ::testing::TestWithParam<Int4Case> {};

TEST_P(Int4Checkpoints, LoadTheFilesWeightsAndServeThem) {
  const Int4Case& c = GetParam();
  ScratchDir float_dir, dir;
  auto o = testing::TinyOptions(c.arch);
  o.hidden_size = c.hidden;
  o.intermediate_size = c.intermediate;
  o.num_heads = c.heads;
  o.dtype = DType::kF32;
  testing::MakeTinyCheckpoint(float_dir.path(), o);
  Int4Checkpoint f;
  f.format = c.format;
  f.group_size = c.group;
  f.symmetric = c.symmetric;
  f.act_order = c.act_order;
  f.zeros_minus_one = c.v1;
  o.int4 = f;
  testing::MakeTinyCheckpoint(dir.path(), o);

  auto plain = DecoderModel::Load(float_dir.path(), DType::kF32);
  auto m = DecoderModel::Load(dir.path(), DType::kF32);  // no flag: the checkpoint decides
  ASSERT_TRUE(plain.ok() && m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->quantization(), Quantization::kInt4);
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  const ModelConfig& cfg = (*m)->config();
  const std::int64_t H = cfg.hidden_size, I = cfg.intermediate_size;
  for (std::int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const DecoderLayerWeights& lw = (*m)->weights().layers[l];
    const DecoderLayerWeights& fw = (*plain)->weights().layers[l];
    struct Stack {
      const LinearWeight& got;
      const LinearWeight& exact;
      std::vector<std::pair<std::string, std::int64_t>> parts;  // module, outputs
      std::int64_t k;
    };
    const Stack stacks[] = {
        {lw.qkv_proj,
         fw.qkv_proj,
         {{"self_attn.q_proj", cfg.q_size()}, {"self_attn.k_proj", cfg.kv_size()}, {"self_attn.v_proj", cfg.kv_size()}},
         H},
        {lw.o_proj, fw.o_proj, {{"self_attn.o_proj", H}}, cfg.q_size()},
        {lw.gate_up_proj, fw.gate_up_proj, {{"mlp.gate_proj", I}, {"mlp.up_proj", I}}, H},
        {lw.down_proj, fw.down_proj, {{"mlp.down_proj", H}}, I}};
    for (const Stack& st : stacks) {
      SCOPED_TRACE(p + st.parts[0].first);
      ASSERT_TRUE(st.got.is_int4());
      std::vector<at::Tensor> want;
      for (const auto& [module, n] : st.parts) want.push_back(Decode(**ckpt, c, p + module, n, st.k));
      const at::Tensor decoded = at::cat(want, 0);
      const at::Tensor loaded = DequantizeInt4(st.got.int4, at::kDouble);
      // (q - z) * s: the same small integers and scales; the kernel's
      // dequantization rounds the product to float32 once.
      const at::Tensor diff = (loaded - decoded).abs();
      EXPECT_TRUE((diff <= decoded.abs() * testing::kF32Roundoff).all().item<bool>()) << diff.max().item<double>();
      // Act-order columns come with their permutation (one group: none needed).
      EXPECT_EQ(st.got.int4.perm.defined(), c.act_order && st.k / (c.group < 0 ? st.k : c.group) > 1);
      // The file holds the float checkpoint's weights rounded to nearest
      // per group: within half a step (scales rounded to float16/32 first
      // can push the range's ends one level over and get clamped: +1%),
      // GPTQ v1's asymmetric zeros (at least 1, stored minus one) a whole
      // step where a group's zero would have been 0.
      const at::Tensor step =
          DequantizeInt4(PackInt4(at::ones_like(UnpackInt4(st.got.int4)), st.got.int4.scale,
                                  at::zeros_like(st.got.int4.zero), st.got.int4.group_size, st.got.int4.perm),
                         at::kDouble);
      const double tol = c.v1 && !c.symmetric ? 1.0 : 0.51;
      const at::Tensor err = (loaded - testing::Dense(st.exact, at::kDouble)).abs();
      EXPECT_TRUE((err <= step * tol).all().item<bool>()) << (err / step).max().item<double>();
    }
  }
  // The serving path on those weights: the reference forward within the
  // activations' rounding (as Int4Model in decoder_paths_test.cc).
  const std::vector<std::int64_t> ids = {5, 17, 42, 99, 3, 250, 7, 8, 120, 64, 33, 1, 2, 299, 150, 77};
  const at::Tensor ref = testing::ReferenceForward(**m, at::tensor(ids, at::kLong));
  const at::Tensor inc = testing::PagedLogits(**m, ids);
  const double scale = ref.abs().max().item<double>();
  const std::int64_t k = std::max({H, I, static_cast<std::int64_t>(ids.size())});
  EXPECT_LE((ref - inc).abs().max().item<double>(),
            testing::RoundingBound(1, cfg.num_hidden_layers, scale, 8 * testing::Int4ActivationUnit()) +
                testing::RoundingBound(k, cfg.num_hidden_layers, scale));
}

INSTANTIATE_TEST_SUITE_P(
    Formats, Int4Checkpoints,
    ::testing::Values(Int4Case{"gptq_sym_g32_llama", "llama", Int4Format::kGptq, 32, true, false, true},
                      Int4Case{"gptq_asym_actorder_g64_qwen2", "qwen2", Int4Format::kGptq, 64, false, true, true},
                      Int4Case{"gptq_v2_asym_channel_qwen3", "qwen3", Int4Format::kGptq, -1, false, false, false},
                      Int4Case{"awq_g32_qwen2", "qwen2", Int4Format::kAwq, 32, false, false, false},
                      Int4Case{"ct_sym_g64_llama", "llama", Int4Format::kCompressedTensors, 64, true, false, false},
                      Int4Case{"ct_asym_actorder_g32_qwen3", "qwen3", Int4Format::kCompressedTensors, 32, false, true,
                               false},
                      Int4Case{"ct_sym_channel_g128_llama", "llama", Int4Format::kCompressedTensors, -1, true, false,
                               false, 128, 256, 4}),
    [](const auto& info) { return std::string(info.param.name); });

// A flag that contradicts the checkpoint.
TEST(Int4Checkpoints, RefuseInt8) {
  ScratchDir dir;
  auto o = testing::TinyOptions("llama");
  o.intermediate_size = 192;
  Int4Checkpoint f;
  f.group_size = 32;
  o.int4 = f;
  testing::MakeTinyCheckpoint(dir.path(), o);
  auto int8 = DecoderModel::Load(dir.path(), DType::kF32, Quantization::kInt8);
  ASSERT_FALSE(int8.ok());
  EXPECT_NE(int8.status().message().find("--quantization int8"), std::string::npos) << int8.status().ToString();
  EXPECT_TRUE(DecoderModel::Load(dir.path(), DType::kF32, Quantization::kInt4).ok());
}

// WeightPolicy::int4_mma (a CUDA worker's ROPESERVE_CUDA_INT4_KERNEL=mma)
// adds the tensor-core kernel's layout of every 4-bit projection whose
// outputs come in 16s (on any device: the layout is made by LibTorch ops),
// beside the plain one; without it there is none.
TEST(Int4Checkpoints, MmaLayoutWhereThePolicyAsks) {
  ScratchDir dir;
  auto o = testing::TinyOptions("llama");
  o.intermediate_size = 192;
  testing::MakeTinyCheckpoint(dir.path(), o);
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  for (bool mma : {false, true}) {
    WeightPolicy policy(DType::kF32, Quantization::kInt4, at::kCPU);
    policy.int4_mma = mma;
    auto w = LoadDecoderWeights(**ckpt, dir.path(), policy);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    int checked = 0;
    for (const DecoderLayerWeights& lw : w->layers) {
      for (const LinearWeight* p : {&lw.qkv_proj, &lw.o_proj, &lw.gate_up_proj, &lw.down_proj}) {
        ASSERT_TRUE(p->is_int4());
        const bool expect = mma && p->int4.packed.size(0) % 16 == 0;
        ASSERT_EQ(p->int4_mma.packed.defined(), expect);
        if (!expect) continue;
        const Int4MmaWeight again = Int4MmaLayout(p->int4);
        EXPECT_TRUE(at::equal(p->int4_mma.packed, again.packed));
        EXPECT_TRUE(at::equal(p->int4_mma.scale, again.scale));
        EXPECT_TRUE(at::equal(p->int4_mma.zero, again.zero));
        ++checked;
      }
    }
    EXPECT_EQ(checked > 0, mma);
  }
}

TEST(Int4Checkpoints, CudaInt4KernelFromTheEnvironment) {
  const char* saved = std::getenv("ROPESERVE_CUDA_INT4_KERNEL");
  const std::string restore = saved == nullptr ? "" : saved;
  unsetenv("ROPESERVE_CUDA_INT4_KERNEL");
  EXPECT_EQ(CudaInt4MmaFromEnvironment().value(), false);
  setenv("ROPESERVE_CUDA_INT4_KERNEL", "gemv", 1);
  EXPECT_EQ(CudaInt4MmaFromEnvironment().value(), false);
  setenv("ROPESERVE_CUDA_INT4_KERNEL", "mma", 1);
  EXPECT_EQ(CudaInt4MmaFromEnvironment().value(), true);
  setenv("ROPESERVE_CUDA_INT4_KERNEL", "marlin", 1);
  const auto bad = CudaInt4MmaFromEnvironment();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ROPESERVE_CUDA_INT4_KERNEL=marlin"), std::string::npos);
  if (saved == nullptr) {
    unsetenv("ROPESERVE_CUDA_INT4_KERNEL");
  } else {
    setenv("ROPESERVE_CUDA_INT4_KERNEL", restore.c_str(), 1);
  }
}

}  // namespace
}  // namespace ropeserve
