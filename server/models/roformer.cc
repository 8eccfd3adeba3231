#include "server/models/roformer.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

#include "server/models/encoder_parts.h"
#include "server/models/rotary.h"
#include "server/models/span_rows.h"

namespace ropeserve {
namespace {

using encoder::LayerNorm;
using encoder::Linear;

// H = hidden_size, E = embedding_size, I = intermediate_size.
struct RoFormerLayer {
  Linear query, key, value;  // [H, H] each
  Linear attention_dense;    // [H, H]
  LayerNorm attention_norm;  // [H]
  Linear intermediate;       // [I, H]
  Linear output;             // [H, I]
  LayerNorm output_norm;     // [H]
};

struct RoFormerWeights {
  at::Tensor word_embeddings;        // [V, E]
  at::Tensor token_type_embeddings;  // [type_vocab_size, E]
  LayerNorm embeddings_norm;         // [E]
  Linear embeddings_project;         // [H, E]; only when E != H
  std::vector<RoFormerLayer> layers;
  // The head: qa_outputs [2, H] (span), classifier [num_labels, H] (token),
  // classifier.out_proj [num_labels, H] after classifier.dense [H, H]
  // (sequence); undefined for the base model.
  Linear head;
  Linear head_dense;
};

// RoFormer's sinusoidal table for positions 0..len-1 in the interleaved
// layout: sin_pos[p, 2i] = sin_pos[p, 2i+1] = sin(p / 10000^(2i/d)), same
// for cos; frequencies and angles in float64, as the reference's numpy table.
std::pair<at::Tensor, at::Tensor> Rope(std::int64_t len, std::int64_t dim, at::ScalarType dtype, at::Device device) {
  at::Tensor inv =
      at::pow(10000.0, -2.0 * at::arange(0, dim / 2, at::TensorOptions().dtype(at::kDouble).device(device)) /
                           static_cast<double>(dim));
  return RotaryTable(inv, at::arange(len, at::TensorOptions().dtype(at::kLong).device(device)), 1.0,
                     RotaryLayout::kInterleaved, at::kDouble, dtype);
}

at::Tensor Rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return ApplyRotary(x, cos, sin, RotaryLayout::kInterleaved);
}

class RoFormerQa final : public encoder::WindowedSpanModel {
 public:
  RoFormerQa(EncoderConfig config, RoFormerWeights w) : WindowedSpanModel(std::move(config)), w_(std::move(w)) {}

 protected:
  // One window, [H, L, D] attention as the reference module (both paths).
  SpanLogits Window(const std::vector<TokenId>& ids, const std::vector<std::uint32_t>& type_ids, bool reference,
                    bool with_hidden) const override;

 private:
  RoFormerWeights w_;
};

SpanLogits RoFormerQa::Window(const std::vector<TokenId>& ids, const std::vector<std::uint32_t>& type_ids, bool,
                              bool with_hidden) const {
  at::NoGradGuard no_grad;
  const EncoderConfig& c = config();
  const auto L = static_cast<std::int64_t>(ids.size());
  const std::int64_t H = c.num_attention_heads, D = c.head_dim;
  const std::vector<std::int64_t> types =
      type_ids.empty() ? std::vector<std::int64_t>(ids.size(), 0) : encoder::ToInt64(type_ids);
  const at::Device device = w_.word_embeddings.device();
  at::Tensor x = at::embedding(w_.word_embeddings, at::tensor(encoder::ToInt64(ids), at::kLong).to(device)) +
                 at::embedding(w_.token_type_embeddings, at::tensor(types, at::kLong).to(device));
  x = w_.embeddings_norm(x, c.norm_eps);
  if (c.embedding_size != c.hidden_size) x = w_.embeddings_project(x);
  auto [cos, sin] = Rope(L, D, w_.word_embeddings.scalar_type(), device);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (const RoFormerLayer& l : w_.layers) {
    auto heads = [&](const Linear& proj) { return proj(x).view({L, H, D}).transpose(0, 1); };
    at::Tensor q = Rotate(heads(l.query), cos, sin);
    at::Tensor k = Rotate(heads(l.key), cos, sin);
    at::Tensor v = heads(l.value);
    if (c.rotary_value) v = Rotate(v, cos, sin);
    at::Tensor probs = encoder::Softmax(at::matmul(q, k.transpose(-1, -2)) * scale);
    at::Tensor context = at::matmul(probs, v).transpose(0, 1).reshape({L, H * D});
    // BERT post-norm.
    at::Tensor h = l.attention_norm(l.attention_dense(context) + x, c.norm_eps);
    at::Tensor inter = encoder::Activation(l.intermediate(h), c.activation);
    x = l.output_norm(l.output(inter) + h, c.norm_eps);
  }
  if (c.head == EncoderHead::kNone) return SpanRows(at::Tensor(), 0, L, x);  // RoFormerModel
  if (c.head == EncoderHead::kSpan) return SpanRows(w_.head(x).contiguous(), 0, L, with_hidden ? x : at::Tensor());
  SpanLogits out = SpanRows(at::Tensor(), 0, L, with_hidden ? x : at::Tensor());
  if (c.head == EncoderHead::kToken) {
    SetClasses(out, w_.head(x));
  } else {  // RoFormerClassificationHead: token 0, dense, the hidden activation, out_proj
    SetClasses(out, w_.head(encoder::Activation(w_.head_dense(x.narrow(0, 0, 1)), c.activation)));
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<SpanModel>> LoadRoFormer(const EncoderConfig& config, const std::string& dir, DType dtype,
                                                  const std::string& device_name) {
  RS_ASSIGN_OR_RETURN(const at::Device device, encoder::ParseDevice(device_name));
  RS_ASSIGN_OR_RETURN(encoder::TensorSet t, encoder::TensorSet::Load(dir, config, ToScalarType(dtype), device));
  RoFormerWeights w;
  w.word_embeddings = t.Take("roformer.embeddings.word_embeddings.weight");
  w.token_type_embeddings = t.Take("roformer.embeddings.token_type_embeddings.weight");
  w.embeddings_norm = t.TakeNorm("roformer.embeddings.LayerNorm");
  if (config.embedding_size != config.hidden_size) w.embeddings_project = t.TakeLinear("roformer.embeddings_project");
  for (std::int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "roformer.encoder.layer." + std::to_string(i) + ".";
    RoFormerLayer l;
    l.query = t.TakeLinear(p + "attention.self.query");
    l.key = t.TakeLinear(p + "attention.self.key");
    l.value = t.TakeLinear(p + "attention.self.value");
    l.attention_dense = t.TakeLinear(p + "attention.output.dense");
    l.attention_norm = t.TakeNorm(p + "attention.output.LayerNorm");
    l.intermediate = t.TakeLinear(p + "intermediate.dense");
    l.output = t.TakeLinear(p + "output.dense");
    l.output_norm = t.TakeNorm(p + "output.LayerNorm");
    w.layers.push_back(std::move(l));
  }
  switch (config.head) {
    case EncoderHead::kSpan:
      w.head = t.TakeLinear("qa_outputs");
      break;
    case EncoderHead::kToken:
      w.head = t.TakeLinear("classifier");
      break;
    case EncoderHead::kSequence:
      w.head_dense = t.TakeLinear("classifier.dense");
      w.head = t.TakeLinear("classifier.out_proj");
      break;
    case EncoderHead::kNone:
      break;
  }
  return std::unique_ptr<SpanModel>(new RoFormerQa(config, std::move(w)));
}

}  // namespace ropeserve
