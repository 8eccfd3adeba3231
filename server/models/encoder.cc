#include "server/models/encoder.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "server/checkpoint/safetensors.h"
#include "server/models/decoder.h"
#include "server/models/span_head.h"
#include "server/models/weight_loader.h"

namespace ropeserve {

struct EncoderQaModel::Weights {
  std::map<std::string, at::Tensor> t;
  at::ScalarType dtype = at::kFloat;  // of every weight and activation
  const at::Tensor* Get(const std::string& name) const {
    auto it = t.find(name);
    return it == t.end() ? nullptr : &it->second;
  }
  at::Tensor Linear(const at::Tensor& x, const std::string& name) const {
    const at::Tensor* b = Get(name + ".bias");
    return at::linear(x, t.at(name + ".weight"), b ? *b : at::Tensor());
  }
  at::Tensor Norm(const at::Tensor& x, const std::string& name, double eps) const {
    const at::Tensor* b = Get(name + ".bias");
    return at::layer_norm(x, {x.size(-1)}, t.at(name + ".weight"), b ? *b : at::Tensor(), eps);
  }
};

namespace {

at::Tensor Activation(const at::Tensor& x, const std::string& act) {
  if (act == "gelu" || act == "gelu_python") return at::gelu(x);  // exact (erf)
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return at::gelu(x, "tanh");
  if (act == "relu") return at::relu(x);
  return at::silu(x);
}

// Attention probabilities: softmax in float32, then the compute dtype (as
// Hugging Face's eager attention for 16-bit models).
at::Tensor Softmax(const at::Tensor& scores) { return at::softmax(scores, -1, at::kFloat).to(scores.scalar_type()); }

// cos/sin [len, head_dim] for positions 0..len-1 (rotate-half layout),
// computed in float32 and cast to `dtype`.
std::pair<at::Tensor, at::Tensor> Rope(std::int64_t len, std::int64_t dim, double theta, at::ScalarType dtype) {
  at::Tensor inv = 1.0 / at::pow(theta, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim));
  at::Tensor pos = at::arange(len, at::kLong).to(at::kFloat);
  at::Tensor freqs = at::outer(pos, inv);
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor RotateHalf(const at::Tensor& x) {
  const std::int64_t h = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

// q, k: [heads, len, dim]; cos, sin: [len, dim].
at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x * cos + RotateHalf(x) * sin;
}

// ---- ModernBERT pieces both paths share (everything but attention) ----

// x + Wo(act(input) * gate), [input, gate] = Wi(mlp_norm(x)): the GeGLU block.
at::Tensor ModernBertMlp(const EncoderQaModel::Weights& w, const EncoderConfig& c, const std::string& p,
                         const at::Tensor& x) {
  auto parts = w.Linear(w.Norm(x, p + "mlp_norm", c.norm_eps), p + "mlp.Wi").chunk(2, -1);
  return x + w.Linear(Activation(parts[0], c.activation) * parts[1], p + "mlp.Wo");
}

// final_norm (-> *hidden, the base model's last_hidden_state), the
// prediction head (dense, activation, norm), classifier: [T, 2].
at::Tensor ModernBertLogits(const EncoderQaModel::Weights& w, const EncoderConfig& c, at::Tensor x, at::Tensor* hidden) {
  x = w.Norm(x, "model.final_norm", c.norm_eps);
  *hidden = x;
  x = w.Norm(Activation(w.Linear(x, "head.dense"), c.classifier_activation), "head.norm", c.norm_eps);
  return w.Linear(x, "classifier").contiguous();
}

// ---- RoFormer ----

// RoFormer's sinusoidal table for positions 0..len-1, expanded to the
// interleaved layout: sin_pos[p, 2i] = sin_pos[p, 2i+1] = sin(p / 10000^(2i/d)),
// same for cos (computed in double, as the reference's numpy table).
std::pair<at::Tensor, at::Tensor> RoFormerRope(std::int64_t len, std::int64_t dim, at::ScalarType dtype) {
  at::Tensor i = at::arange(0, dim / 2, at::kDouble);
  at::Tensor inv = at::pow(10000.0, -2.0 * i / static_cast<double>(dim));
  at::Tensor angles = at::outer(at::arange(len, at::kDouble), inv).to(at::kFloat);  // [len, d/2]
  at::Tensor sin = at::stack({angles.sin(), angles.sin()}, -1).reshape({len, dim});
  at::Tensor cos = at::stack({angles.cos(), angles.cos()}, -1).reshape({len, dim});
  return {cos.to(dtype), sin.to(dtype)};
}

// x * cos + [-x1, x0, -x3, x2, ...] * sin over the last dimension.
at::Tensor RoFormerRotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  auto sizes = x.sizes().vec();
  at::Tensor pairs = x.reshape({-1, x.size(-1) / 2, 2});
  at::Tensor rotated = at::stack({-pairs.select(-1, 1), pairs.select(-1, 0)}, -1).reshape(sizes);
  return x * cos + rotated * sin;
}

at::Tensor RoFormerEmbed(const EncoderQaModel::Weights& w, const EncoderConfig& c, const std::vector<std::int64_t>& ids,
                         const std::vector<std::int64_t>& types) {
  at::Tensor x = at::embedding(w.t.at("roformer.embeddings.word_embeddings.weight"), at::tensor(ids, at::kLong)) +
                 at::embedding(w.t.at("roformer.embeddings.token_type_embeddings.weight"), at::tensor(types, at::kLong));
  x = w.Norm(x, "roformer.embeddings.LayerNorm", c.norm_eps);
  if (c.embedding_size != c.hidden_size) x = w.Linear(x, "roformer.embeddings_project");
  return x;
}

// One layer's post-attention part (BERT post-norm), on [T, H].
at::Tensor RoFormerAfterAttention(const EncoderQaModel::Weights& w, const EncoderConfig& c, const std::string& p,
                                  const at::Tensor& x, const at::Tensor& context) {
  at::Tensor h = w.Norm(w.Linear(context, p + "attention.output.dense") + x, p + "attention.output.LayerNorm", c.norm_eps);
  at::Tensor inter = Activation(w.Linear(h, p + "intermediate.dense"), c.activation);
  return w.Norm(w.Linear(inter, p + "output.dense") + h, p + "output.LayerNorm", c.norm_eps);
}

std::vector<std::int64_t> Types(const std::vector<std::uint32_t>& type_ids, std::size_t n) {
  if (type_ids.empty()) return std::vector<std::int64_t>(n, 0);
  return std::vector<std::int64_t>(type_ids.begin(), type_ids.end());
}

// One window, [H, L, D] attention as the reference module. RoFormer has no
// separate fast path: every layer is dense GEMMs and one attention per
// window, which is what a fast path would do too.
SpanLogits RoFormerWindow(const EncoderQaModel::Weights& w, const EncoderConfig& c,
                          const std::vector<std::uint32_t>& ids, const std::vector<std::uint32_t>& type_ids,
                          bool with_hidden) {
  at::NoGradGuard no_grad;
  const auto L = static_cast<std::int64_t>(ids.size());
  const std::int64_t H = c.num_attention_heads, D = c.head_dim;
  at::Tensor x = RoFormerEmbed(w, c, std::vector<std::int64_t>(ids.begin(), ids.end()), Types(type_ids, ids.size()));
  auto [cos, sin] = RoFormerRope(L, D, w.dtype);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "roformer.encoder.layer." + std::to_string(i) + ".";
    auto heads = [&](const char* name) { return w.Linear(x, p + "attention.self." + name).view({L, H, D}).transpose(0, 1); };
    at::Tensor q = RoFormerRotate(heads("query"), cos, sin);
    at::Tensor k = RoFormerRotate(heads("key"), cos, sin);
    at::Tensor v = heads("value");
    if (c.rotary_value) v = RoFormerRotate(v, cos, sin);
    at::Tensor probs = Softmax(at::matmul(q, k.transpose(-1, -2)) * scale);
    at::Tensor context = at::matmul(probs, v).transpose(0, 1).reshape({L, H * D});
    x = RoFormerAfterAttention(w, c, p, x, context);
  }
  return SpanRows(w.Linear(x, "qa_outputs").contiguous(), 0, L, with_hidden ? x : at::Tensor());
}

// ---- ModernBERT ----

// One window through ModernBERT's trunk and head. The two paths differ
// only in attention: `banded` (the fast path) runs sliding-window layers in
// query blocks that read only their band of keys; the reference builds
// Hugging Face's dense masks.
SpanLogits ModernBertWindow(const EncoderQaModel::Weights& w, const EncoderConfig& c,
                            const std::vector<std::uint32_t>& ids, bool banded, bool with_hidden) {
  at::NoGradGuard no_grad;
  const auto L = static_cast<std::int64_t>(ids.size());
  const std::int64_t H = c.num_attention_heads, D = c.head_dim;
  std::vector<std::int64_t> id64(ids.begin(), ids.end());
  at::Tensor x = at::embedding(w.t.at("model.embeddings.tok_embeddings.weight"), at::tensor(id64, at::kLong));
  x = w.Norm(x, "model.embeddings.norm", c.norm_eps);
  auto [gcos, gsin] = Rope(L, D, c.global_rope_theta, w.dtype);
  auto [lcos, lsin] = Rope(L, D, c.local_rope_theta, w.dtype);
  const std::int64_t half = c.local_attention / 2;
  at::Tensor sliding_mask;  // reference: 0 where attended, the dtype's minimum elsewhere (as HF builds it)
  if (!banded) {
    at::Tensor rows = at::arange(L, at::kLong);
    at::Tensor distance = (rows.unsqueeze(1) - rows.unsqueeze(0)).abs();
    sliding_mask =
        at::zeros({L, L}).masked_fill(distance > half, std::numeric_limits<float>::lowest()).to(w.dtype);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  constexpr std::int64_t kBlock = 64;  // query block of the banded sliding-window layers
  // The fast path keeps q, k, v token-major ([L, H, D], rotated in place of
  // the projection's layout); the reference mirrors HF's [H, L, D].
  const at::Tensor gcos_t = gcos.unsqueeze(1), gsin_t = gsin.unsqueeze(1);  // [L, 1, D]
  const at::Tensor lcos_t = lcos.unsqueeze(1), lsin_t = lsin.unsqueeze(1);
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const bool global = c.global_layers[static_cast<std::size_t>(i)];
    at::Tensor h = i == 0 ? x : w.Norm(x, p + "attn_norm", c.norm_eps);
    at::Tensor attn;  // [L, H * D]
    if (!banded) {
      at::Tensor qkv = w.Linear(h, p + "attn.Wqkv").view({L, 3, H, D}).permute({1, 2, 0, 3});  // [3, H, L, D]
      at::Tensor q = ApplyRope(qkv[0], global ? gcos : lcos, global ? gsin : lsin);
      at::Tensor k = ApplyRope(qkv[1], global ? gcos : lcos, global ? gsin : lsin);
      at::Tensor scores = at::matmul(q, k.transpose(-1, -2)) * scale;
      if (!global) scores = scores + sliding_mask;
      attn = at::matmul(Softmax(scores), qkv[2]).permute({1, 0, 2}).reshape({L, H * D});
    } else {
      at::Tensor qkv = w.Linear(h, p + "attn.Wqkv").view({L, 3, H, D});
      at::Tensor q = ApplyRope(qkv.select(1, 0), global ? gcos_t : lcos_t, global ? gsin_t : lsin_t);  // [L, H, D]
      at::Tensor k = ApplyRope(qkv.select(1, 1), global ? gcos_t : lcos_t, global ? gsin_t : lsin_t);
      at::Tensor v = qkv.select(1, 2);
      at::Tensor out = at::empty({L, H, D}, x.options());
      // Global layers: one block of every query over every key; sliding
      // layers: blocks of kBlock queries over their band of keys.
      const std::int64_t block = global ? L : kBlock;
      for (std::int64_t qs = 0; qs < L; qs += block) {
        const std::int64_t qn = std::min(block, L - qs);
        const std::int64_t ks = global ? 0 : std::max<std::int64_t>(0, qs - half);
        const std::int64_t ke = global ? L : std::min(L, qs + qn + half);
        at::Tensor qb = q.narrow(0, qs, qn).transpose(0, 1);  // [H, qn, D]
        at::Tensor kb = k.narrow(0, ks, ke - ks).transpose(0, 1);
        at::Tensor vb = v.narrow(0, ks, ke - ks).transpose(0, 1);
        at::Tensor scores = at::matmul(qb, kb.transpose(-1, -2)) * scale;  // [H, qn, kn]
        if (!global) {
          at::Tensor qi = at::arange(qs, qs + qn, at::kLong).unsqueeze(1);
          at::Tensor ki = at::arange(ks, ke, at::kLong).unsqueeze(0);
          scores = scores.masked_fill((qi - ki).abs() > half, -std::numeric_limits<float>::infinity());
        }
        out.narrow(0, qs, qn).copy_(at::matmul(Softmax(scores), vb).transpose(0, 1));
      }
      attn = out.reshape({L, H * D});
    }
    x = x + w.Linear(attn, p + "attn.Wo");
    x = ModernBertMlp(w, c, p, x);
  }
  at::Tensor hidden;
  const at::Tensor logits = ModernBertLogits(w, c, x, &hidden);
  return SpanRows(logits, 0, L, with_hidden ? hidden : at::Tensor());
}

}  // namespace

EncoderQaModel::~EncoderQaModel() = default;

StatusOr<std::unique_ptr<EncoderQaModel>> EncoderQaModel::Load(const std::string& dir, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) return InvalidArgument("span models compute in float32 or bfloat16");
  std::ifstream in(dir + "/config.json");
  if (!in) return NotFound(dir + "/config.json: cannot read");
  std::stringstream ss;
  ss << in.rdbuf();
  std::unique_ptr<EncoderQaModel> m(new EncoderQaModel());
  RS_ASSIGN_OR_RETURN(m->config_, ParseEncoderConfig(ss.str(), dir + "/config.json"));
  if (m->config_.family == EncoderFamily::kDecoder) {
    RS_ASSIGN_OR_RETURN(m->decoder_, DecoderModel::LoadSpanModel(dir, dtype));
    return m;
  }
  const std::string path = dir + "/model.safetensors";
  RS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  m->w_ = std::make_unique<Weights>();
  m->w_->dtype = ToScalarType(dtype);
  for (const TensorSpec& spec : ExpectedEncoderTensors(m->config_)) {
    const TensorInfo* info = file->Find(spec.name);
    if (info == nullptr) return InvalidArgument(path + ": missing tensor " + spec.name);
    if (info->shape != spec.shape) {
      std::string want, got;
      for (auto d : spec.shape) want += std::to_string(d) + " ";
      for (auto d : info->shape) got += std::to_string(d) + " ";
      return InvalidArgument(path + ": tensor " + spec.name + " has shape [ " + got + "], the config says [ " + want + "]");
    }
    if (info->dtype != DType::kF32 && info->dtype != DType::kBF16 && info->dtype != DType::kF16)
      return InvalidArgument(path + ": tensor " + spec.name + " is not a floating-point tensor");
    at::Tensor t = at::empty(info->shape, at::TensorOptions().dtype(ToScalarType(info->dtype)));
    std::memcpy(t.data_ptr(), file->Data(*info), info->end - info->begin);
    m->w_->t[spec.name] = t.to(m->w_->dtype);
  }
  return m;
}

Status EncoderQaModel::CheckIds(const std::vector<std::uint32_t>& ids,
                                const std::vector<std::uint32_t>& type_ids) const {
  if (ids.empty()) return InvalidArgument("an empty window");
  // Only RoFormer has token types; the other families ignore them.
  if (!type_ids.empty() && config_.family == EncoderFamily::kRoFormer) {
    if (type_ids.size() != ids.size()) return InvalidArgument("token type ids and ids differ in length");
    for (auto t : type_ids)
      if (static_cast<std::int64_t>(t) >= std::max<std::int64_t>(config_.type_vocab_size, 1))
        return InvalidArgument("token type id " + std::to_string(t) + " is outside the model's type vocabulary");
  }
  if (static_cast<std::int64_t>(ids.size()) > config_.max_position_embeddings)
    return InvalidArgument("a window of " + std::to_string(ids.size()) + " tokens exceeds max_position_embeddings " +
                           std::to_string(config_.max_position_embeddings));
  for (auto id : ids)
    if (static_cast<std::int64_t>(id) >= config_.vocab_size)
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary");
  return Status::Ok();
}

StatusOr<SpanLogits> EncoderQaModel::ForwardReference(const std::vector<std::uint32_t>& ids,
                                                      const std::vector<std::uint32_t>& type_ids,
                                                      bool with_hidden) const {
  RS_RETURN_IF_ERROR(CheckIds(ids, type_ids));
  switch (config_.family) {
    case EncoderFamily::kRoFormer: return RoFormerWindow(*w_, config_, ids, type_ids, with_hidden);
    case EncoderFamily::kDecoder:
      return std::move(
          decoder_->ForwardSpans({std::vector<std::int64_t>(ids.begin(), ids.end())}, true, with_hidden)[0]);
    case EncoderFamily::kModernBert: break;
  }
  return ModernBertWindow(*w_, config_, ids, /*banded=*/false, with_hidden);
}

StatusOr<std::vector<SpanLogits>> EncoderQaModel::ForwardWindows(
    const std::vector<std::vector<std::uint32_t>>& windows,
    const std::vector<std::vector<std::uint32_t>>& type_ids, bool with_hidden) const {
  if (!type_ids.empty() && type_ids.size() != windows.size())
    return InvalidArgument("token type ids are needed for every window or none");
  auto types = [&](std::size_t k) { return type_ids.empty() ? std::vector<std::uint32_t>{} : type_ids[k]; };
  for (std::size_t k = 0; k < windows.size(); ++k) RS_RETURN_IF_ERROR(CheckIds(windows[k], types(k)));
  if (config_.family == EncoderFamily::kDecoder) {
    std::vector<std::vector<std::int64_t>> ids;
    for (const auto& win : windows) ids.emplace_back(win.begin(), win.end());
    return decoder_->ForwardSpans(ids, false, with_hidden);
  }
  // Every window on tensors of its own shape: GEMM libraries round a row
  // differently depending on the matrix's row count and on the row's place
  // in it (OpenBLAS does), so sharing GEMMs across windows would make a
  // window's logits depend on its neighbours.
  std::vector<SpanLogits> out;
  out.reserve(windows.size());
  for (std::size_t k = 0; k < windows.size(); ++k) {
    out.push_back(config_.family == EncoderFamily::kRoFormer
                      ? RoFormerWindow(*w_, config_, windows[k], types(k), with_hidden)
                      : ModernBertWindow(*w_, config_, windows[k], /*banded=*/true, with_hidden));
  }
  return out;
}

}  // namespace ropeserve
