// Properties of the reference ops that everything else is checked against.
#include "kernels/reference/reference_ops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "server/checkpoint/rope.h"

namespace ropeserve {
namespace {

at::Tensor InvFreq(const std::string& scaling_json) {
  std::string j = R"({"architectures":["LlamaForCausalLM"],"vocab_size":10,"hidden_size":128,"intermediate_size":8,
    "num_hidden_layers":1,"num_attention_heads":2,"max_position_embeddings":4096)";
  if (!scaling_json.empty()) j += R"(,"rope_scaling":)" + scaling_json;
  auto c = ParseModelConfig(j + "}", "t");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  auto f = ComputeRopeFrequencies(*c);
  return at::tensor(f.inv_freq, at::kDouble);
}

// RoPE's defining property: after rotation, q.k depends only on the distance
// between the positions, for every frequency set.
TEST(ReferenceRope, DotProductDependsOnlyOnPositionDifference) {
  at::manual_seed(0);
  for (
      const std::string scaling :
      {"", R"({"type":"linear","factor":4.0})",
       R"({"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":512})",
       R"({"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":1024})"}) {
    at::Tensor inv_freq = InvFreq(scaling);
    at::Tensor q = at::randn({1, 1, 64}, at::kDouble);
    at::Tensor k = at::randn({1, 1, 64}, at::kDouble);
    auto dot_at = [&](std::int64_t pq, std::int64_t pk) {
      auto [cq, sq] = reference::RopeCosSin(inv_freq, at::tensor({pq}, at::kLong), 1.0, at::kDouble);
      auto [ck, sk] = reference::RopeCosSin(inv_freq, at::tensor({pk}, at::kLong), 1.0, at::kDouble);
      return (reference::ApplyRope(q, cq, sq) * reference::ApplyRope(k, ck, sk)).sum().item<double>();
    };
    // RopeCosSin computes angles in float32 as Hugging Face does, so larger
    // positions carry ~1e-4 relative angle error.
    for (auto [a, b, shift] : {std::tuple{5, 2, 100}, {17, 17, 1000}, {0, 9, 300}, {40, 3, 2000}})
      EXPECT_NEAR(dot_at(a, b), dot_at(a + shift, b + shift), 2e-3 * std::abs(dot_at(a, b)) + 2e-3)
          << scaling << " positions " << a << "," << b;
    // ...and does depend on the difference.
    EXPECT_GT(std::abs(dot_at(5, 2) - dot_at(9, 2)), 1e-3) << scaling;
  }
}

TEST(ReferenceRope, PartialRotaryLeavesTheRestUntouched) {
  at::Tensor x = at::randn({3, 2, 16});
  at::Tensor inv_freq = at::tensor({1.0, 0.1}, at::kFloat);  // rotary_dim 4
  auto [c, s] = reference::RopeCosSin(inv_freq, at::arange(3, at::kLong), 1.0, at::kFloat);
  at::Tensor y = reference::ApplyRope(x, c, s);
  EXPECT_TRUE(at::equal(y.narrow(-1, 4, 12), x.narrow(-1, 4, 12)));
  EXPECT_TRUE(at::allclose(y[0], x[0]));  // position 0: identity
  EXPECT_FALSE(at::allclose(y[1].narrow(-1, 0, 4), x[1].narrow(-1, 0, 4)));
}

TEST(ReferenceOps, RmsNormMatchesFormula) {
  at::Tensor x = at::randn({4, 8}, at::kDouble);
  at::Tensor w = at::randn({8}, at::kDouble);
  at::Tensor want = x / at::sqrt(x.pow(2).mean(-1, true) + 1e-6) * w;
  EXPECT_TRUE(
      at::allclose(reference::RmsNorm(x.to(at::kFloat), w.to(at::kFloat), 1e-6).to(at::kDouble), want, 1e-5, 1e-6));
}

TEST(ReferenceOps, CausalAttentionMatchesPerQueryLoop) {
  at::manual_seed(1);
  const std::int64_t T = 6, hq = 4, hkv = 2, D = 8;
  at::Tensor q = at::randn({T, hq, D}, at::kDouble), k = at::randn({T, hkv, D}, at::kDouble),
             v = at::randn({T, hkv, D}, at::kDouble);
  at::Tensor out = reference::CausalAttention(q, k, v, 0.3);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < hq; ++h) {
      const std::int64_t g = h / (hq / hkv);
      at::Tensor scores = at::matmul(k.narrow(0, 0, t + 1).select(1, g), q[t][h]) * 0.3;  // [t+1]
      at::Tensor want = at::matmul(at::softmax(scores, 0), v.narrow(0, 0, t + 1).select(1, g));
      EXPECT_TRUE(at::allclose(out[t][h], want, 1e-9, 1e-9)) << t << "," << h;
    }
}

}  // namespace
}  // namespace ropeserve
