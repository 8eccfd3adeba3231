#include "server/models/modernbert.h"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>

#include "server/models/encoder_parts.h"
#include "server/models/rotary.h"
#include "server/models/span_rows.h"

namespace ropeserve {
namespace {

using encoder::LayerNorm;
using encoder::Linear;

// H = hidden_size, I = intermediate_size, V = vocab_size; biases as the
// config says (norm_bias, attention_bias, mlp_bias, classifier_bias).
struct ModernBertLayer {
  LayerNorm attn_norm;  // [H]; absent (undefined) in layer 0
  Linear wqkv;          // [3H, H]: q, k, v heads, in that order
  Linear wo;            // [H, H]
  LayerNorm mlp_norm;   // [H]
  Linear wi;            // [2I, H]: GeGLU input and gate
  Linear mlp_wo;        // [H, I]
  bool global = false;  // full attention (else the sliding window)
};

struct ModernBertWeights {
  at::Tensor tok_embeddings;  // [V, H]
  LayerNorm embeddings_norm;  // [H]
  std::vector<ModernBertLayer> layers;
  LayerNorm final_norm;  // [H]
  // The span or classifier head; undefined for the base model (ModernBertModel).
  Linear head_dense;    // [H, H]
  LayerNorm head_norm;  // [H]
  Linear classifier;    // [num_labels, H]
};

// cos/sin [len, head_dim] for positions 0..len-1 (rotate-half):
// inv_freq = 1 / theta^(2i/d) in float32, as ModernBERT's rotary module.
std::pair<at::Tensor, at::Tensor> Rope(std::int64_t len, std::int64_t dim, double theta, at::ScalarType dtype,
                                       at::Device device) {
  const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor inv = 1.0 / at::pow(theta, at::arange(0, dim, 2, longs).to(at::kFloat) / static_cast<double>(dim));
  return RotaryTable(inv, at::arange(len, longs), 1.0, RotaryLayout::kRotateHalf, at::kFloat, dtype);
}

at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return ApplyRotary(x, cos, sin, RotaryLayout::kRotateHalf);
}

class ModernBertQa final : public encoder::WindowedSpanModel {
 public:
  ModernBertQa(EncoderConfig config, ModernBertWeights w) : WindowedSpanModel(std::move(config)), w_(std::move(w)) {}

 protected:
  SpanLogits Window(const std::vector<TokenId>& ids, const std::vector<std::uint32_t>& type_ids, bool reference,
                    bool with_hidden) const override;

 private:
  // x + Wo(act(input) * gate), [input, gate] = Wi(mlp_norm(x)): the GeGLU block.
  at::Tensor Mlp(const ModernBertLayer& l, const at::Tensor& x) const {
    const EncoderConfig& c = config();
    auto parts = l.wi(l.mlp_norm(x, c.norm_eps)).chunk(2, -1);
    return x + l.mlp_wo(encoder::Activation(parts[0], c.activation) * parts[1]);
  }
  ModernBertWeights w_;
};

// The two paths differ only in attention: the serving path runs
// sliding-window layers in query blocks that read only their band of keys;
// the reference builds Hugging Face's dense masks.
SpanLogits ModernBertQa::Window(const std::vector<TokenId>& ids, const std::vector<std::uint32_t>&, bool reference,
                                bool with_hidden) const {
  at::NoGradGuard no_grad;
  const EncoderConfig& c = config();
  const auto L = static_cast<std::int64_t>(ids.size());
  const std::int64_t H = c.num_attention_heads, D = c.head_dim;
  const at::ScalarType dtype = w_.tok_embeddings.scalar_type();
  const at::Device device = w_.tok_embeddings.device();
  const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor x = at::embedding(w_.tok_embeddings, at::tensor(encoder::ToInt64(ids), at::kLong).to(device));
  x = w_.embeddings_norm(x, c.norm_eps);
  auto [gcos, gsin] = Rope(L, D, c.global_rope_theta, dtype, device);
  auto [lcos, lsin] = Rope(L, D, c.local_rope_theta, dtype, device);
  const std::int64_t half = c.local_attention / 2;
  at::Tensor sliding_mask;  // reference: 0 where attended, the dtype's minimum elsewhere (as HF builds it)
  if (reference) {
    at::Tensor rows = at::arange(L, longs);
    at::Tensor distance = (rows.unsqueeze(1) - rows.unsqueeze(0)).abs();
    sliding_mask = at::zeros({L, L}, at::TensorOptions().device(device))
                       .masked_fill(distance > half, std::numeric_limits<float>::lowest())
                       .to(dtype);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  constexpr std::int64_t kBlock = 64;  // query block of the banded sliding-window layers
  // The serving path keeps q, k, v token-major ([L, H, D], rotated in place
  // of the projection's layout); the reference mirrors HF's [H, L, D].
  const at::Tensor gcos_t = gcos.unsqueeze(1), gsin_t = gsin.unsqueeze(1);  // [L, 1, D]
  const at::Tensor lcos_t = lcos.unsqueeze(1), lsin_t = lsin.unsqueeze(1);
  for (std::size_t i = 0; i < w_.layers.size(); ++i) {
    const ModernBertLayer& l = w_.layers[i];
    at::Tensor h = i == 0 ? x : l.attn_norm(x, c.norm_eps);
    at::Tensor attn;  // [L, H * D]
    if (reference) {
      at::Tensor qkv = l.wqkv(h).view({L, 3, H, D}).permute({1, 2, 0, 3});  // [3, H, L, D]
      at::Tensor q = ApplyRope(qkv[0], l.global ? gcos : lcos, l.global ? gsin : lsin);
      at::Tensor k = ApplyRope(qkv[1], l.global ? gcos : lcos, l.global ? gsin : lsin);
      at::Tensor scores = at::matmul(q, k.transpose(-1, -2)) * scale;
      if (!l.global) scores = scores + sliding_mask;
      attn = at::matmul(encoder::Softmax(scores), qkv[2]).permute({1, 0, 2}).reshape({L, H * D});
    } else {
      at::Tensor qkv = l.wqkv(h).view({L, 3, H, D});
      at::Tensor q = ApplyRope(qkv.select(1, 0), l.global ? gcos_t : lcos_t, l.global ? gsin_t : lsin_t);  // [L, H, D]
      at::Tensor k = ApplyRope(qkv.select(1, 1), l.global ? gcos_t : lcos_t, l.global ? gsin_t : lsin_t);
      at::Tensor v = qkv.select(1, 2);
      at::Tensor out = at::empty({L, H, D}, x.options());
      // Global layers: one block of every query over every key; sliding
      // layers: blocks of kBlock queries over their band of keys.
      const std::int64_t block = l.global ? L : kBlock;
      for (std::int64_t qs = 0; qs < L; qs += block) {
        const std::int64_t qn = std::min(block, L - qs);
        const std::int64_t ks = l.global ? 0 : std::max<std::int64_t>(0, qs - half);
        const std::int64_t ke = l.global ? L : std::min(L, qs + qn + half);
        at::Tensor qb = q.narrow(0, qs, qn).transpose(0, 1);  // [H, qn, D]
        at::Tensor kb = k.narrow(0, ks, ke - ks).transpose(0, 1);
        at::Tensor vb = v.narrow(0, ks, ke - ks).transpose(0, 1);
        at::Tensor scores = at::matmul(qb, kb.transpose(-1, -2)) * scale;  // [H, qn, kn]
        if (!l.global) {
          at::Tensor qi = at::arange(qs, qs + qn, longs).unsqueeze(1);
          at::Tensor ki = at::arange(ks, ke, longs).unsqueeze(0);
          scores = scores.masked_fill((qi - ki).abs() > half, -std::numeric_limits<float>::infinity());
        }
        out.narrow(0, qs, qn).copy_(at::matmul(encoder::Softmax(scores), vb).transpose(0, 1));
      }
      attn = out.reshape({L, H * D});
    }
    x = x + l.wo(attn);
    x = Mlp(l, x);
  }
  // final_norm (the base model's last_hidden_state), the prediction head
  // (dense, activation, norm), classifier: [L, 2] for a span head.
  const at::Tensor hidden = w_.final_norm(x, c.norm_eps);
  if (c.head == EncoderHead::kNone) return SpanRows(at::Tensor(), 0, L, hidden);  // ModernBertModel
  // The prediction head and classifier on rows of the hidden state: every
  // token (span and token heads) or the pooled sequence (token 0 or the
  // mean of all, as classifier_pooling says).
  auto head = [&](const at::Tensor& rows) {
    return w_.classifier(w_.head_norm(encoder::Activation(w_.head_dense(rows), c.classifier_activation), c.norm_eps));
  };
  if (c.head == EncoderHead::kSpan)
    return SpanRows(head(hidden).contiguous(), 0, L, with_hidden ? hidden : at::Tensor());
  SpanLogits out = SpanRows(at::Tensor(), 0, L, with_hidden ? hidden : at::Tensor());
  if (c.head == EncoderHead::kToken) {
    SetClasses(out, head(hidden));
  } else {
    SetClasses(out, head(c.classifier_pooling == "mean" ? hidden.mean(0, /*keepdim=*/true) : hidden.narrow(0, 0, 1)));
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<SpanModel>> LoadModernBert(const EncoderConfig& config, const std::string& dir, DType dtype,
                                                    const std::string& device_name) {
  RS_ASSIGN_OR_RETURN(const at::Device device, encoder::ParseDevice(device_name));
  RS_ASSIGN_OR_RETURN(encoder::TensorSet t, encoder::TensorSet::Load(dir, config, ToScalarType(dtype), device));
  ModernBertWeights w;
  w.tok_embeddings = t.Take("model.embeddings.tok_embeddings.weight");
  w.embeddings_norm = t.TakeNorm("model.embeddings.norm");
  for (std::int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    ModernBertLayer l;
    if (i > 0) l.attn_norm = t.TakeNorm(p + "attn_norm");
    l.wqkv = t.TakeLinear(p + "attn.Wqkv");
    l.wo = t.TakeLinear(p + "attn.Wo");
    l.mlp_norm = t.TakeNorm(p + "mlp_norm");
    l.wi = t.TakeLinear(p + "mlp.Wi");
    l.mlp_wo = t.TakeLinear(p + "mlp.Wo");
    l.global = config.global_layers[static_cast<std::size_t>(i)];
    w.layers.push_back(std::move(l));
  }
  w.final_norm = t.TakeNorm("model.final_norm");
  if (config.head == EncoderHead::kNone) return std::unique_ptr<SpanModel>(new ModernBertQa(config, std::move(w)));
  w.head_dense = t.TakeLinear("head.dense");
  w.head_norm = t.TakeNorm("head.norm");
  w.classifier = t.TakeLinear("classifier");
  return std::unique_ptr<SpanModel>(new ModernBertQa(config, std::move(w)));
}

}  // namespace ropeserve
