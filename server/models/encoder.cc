#include "server/models/encoder.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "server/checkpoint/safetensors.h"
#include "server/models/weight_loader.h"

namespace ropeserve {

struct EncoderQaModel::Weights {
  std::map<std::string, at::Tensor> t;
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

// cos/sin [len, head_dim] for positions 0..len-1 (rotate-half layout).
std::pair<at::Tensor, at::Tensor> Rope(std::int64_t len, std::int64_t dim, double theta) {
  at::Tensor inv = 1.0 / at::pow(theta, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim));
  at::Tensor pos = at::arange(len, at::kLong).to(at::kFloat);
  at::Tensor freqs = at::outer(pos, inv);
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

at::Tensor RotateHalf(const at::Tensor& x) {
  const std::int64_t h = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

// q, k: [heads, len, dim]; cos, sin: [len, dim].
at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x * cos + RotateHalf(x) * sin;
}

}  // namespace

EncoderQaModel::~EncoderQaModel() = default;

StatusOr<std::unique_ptr<EncoderQaModel>> EncoderQaModel::Load(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  if (!in) return NotFound(dir + "/config.json: cannot read");
  std::stringstream ss;
  ss << in.rdbuf();
  std::unique_ptr<EncoderQaModel> m(new EncoderQaModel());
  RS_ASSIGN_OR_RETURN(m->config_, ParseEncoderConfig(ss.str(), dir + "/config.json"));
  if (m->config_.family != EncoderFamily::kModernBert)
    return Unimplemented(dir + ": " + m->config_.architecture + " is parsed but its model is not built yet");
  const std::string path = dir + "/model.safetensors";
  RS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  m->w_ = std::make_unique<Weights>();
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
    m->w_->t[spec.name] = t.to(at::kFloat);
  }
  return m;
}

Status EncoderQaModel::CheckIds(const std::vector<std::uint32_t>& ids) const {
  if (ids.empty()) return InvalidArgument("an empty window");
  if (static_cast<std::int64_t>(ids.size()) > config_.max_position_embeddings)
    return InvalidArgument("a window of " + std::to_string(ids.size()) + " tokens exceeds max_position_embeddings " +
                           std::to_string(config_.max_position_embeddings));
  for (auto id : ids)
    if (static_cast<std::int64_t>(id) >= config_.vocab_size)
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary");
  return Status::Ok();
}

StatusOr<SpanLogits> EncoderQaModel::ForwardReference(const std::vector<std::uint32_t>& ids) const {
  RS_RETURN_IF_ERROR(CheckIds(ids));
  at::NoGradGuard no_grad;
  const EncoderConfig& c = config_;
  const Weights& w = *w_;
  const auto L = static_cast<std::int64_t>(ids.size());
  const std::int64_t H = c.num_attention_heads, D = c.head_dim;
  std::vector<std::int64_t> id64(ids.begin(), ids.end());
  at::Tensor x = at::embedding(w.t.at("model.embeddings.tok_embeddings.weight"), at::tensor(id64, at::kLong));
  x = w.Norm(x, "model.embeddings.norm", c.norm_eps);
  auto [gcos, gsin] = Rope(L, D, c.global_rope_theta);
  auto [lcos, lsin] = Rope(L, D, c.local_rope_theta);
  // Masks as HF builds them: 0 where attended, the dtype's minimum elsewhere.
  at::Tensor rows = at::arange(L, at::kLong);
  at::Tensor distance = (rows.unsqueeze(1) - rows.unsqueeze(0)).abs();
  at::Tensor sliding_mask = at::zeros({L, L}).masked_fill(distance > c.local_attention / 2,
                                                          std::numeric_limits<float>::lowest());
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const bool global = c.global_layers[static_cast<std::size_t>(i)];
    at::Tensor h = i == 0 ? x : w.Norm(x, p + "attn_norm", c.norm_eps);
    at::Tensor qkv = w.Linear(h, p + "attn.Wqkv").view({L, 3, H, D}).permute({1, 2, 0, 3});  // [3, H, L, D]
    at::Tensor q = ApplyRope(qkv[0], global ? gcos : lcos, global ? gsin : lsin);
    at::Tensor k = ApplyRope(qkv[1], global ? gcos : lcos, global ? gsin : lsin);
    at::Tensor scores = at::matmul(q, k.transpose(-1, -2)) * scale;
    if (!global) scores = scores + sliding_mask;
    at::Tensor attn = at::matmul(at::softmax(scores, -1), qkv[2]);  // [H, L, D]
    x = x + w.Linear(attn.permute({1, 0, 2}).reshape({L, H * D}), p + "attn.Wo");
    at::Tensor wi = w.Linear(w.Norm(x, p + "mlp_norm", c.norm_eps), p + "mlp.Wi");
    auto parts = wi.chunk(2, -1);
    x = x + w.Linear(Activation(parts[0], c.activation) * parts[1], p + "mlp.Wo");
  }
  x = w.Norm(x, "model.final_norm", c.norm_eps);
  x = w.Norm(Activation(w.Linear(x, "head.dense"), c.classifier_activation), "head.norm", c.norm_eps);
  at::Tensor logits = w.Linear(x, "classifier").contiguous();  // [L, 2]
  SpanLogits out;
  at::Tensor s = logits.select(1, 0).contiguous(), e = logits.select(1, 1).contiguous();
  out.start.assign(s.data_ptr<float>(), s.data_ptr<float>() + L);
  out.end.assign(e.data_ptr<float>(), e.data_ptr<float>() + L);
  return out;
}

StatusOr<std::vector<SpanLogits>> EncoderQaModel::ForwardPacked(
    const std::vector<std::vector<std::uint32_t>>& windows) const {
  if (windows.empty()) return std::vector<SpanLogits>{};
  std::vector<std::int64_t> ids, positions, starts;
  for (const auto& win : windows) {
    RS_RETURN_IF_ERROR(CheckIds(win));
    starts.push_back(static_cast<std::int64_t>(ids.size()));
    for (std::size_t j = 0; j < win.size(); ++j) {
      ids.push_back(win[j]);
      positions.push_back(static_cast<std::int64_t>(j));
    }
  }
  starts.push_back(static_cast<std::int64_t>(ids.size()));
  at::NoGradGuard no_grad;
  const EncoderConfig& c = config_;
  const Weights& w = *w_;
  const auto T = static_cast<std::int64_t>(ids.size());
  const std::int64_t H = c.num_attention_heads, D = c.head_dim;
  std::int64_t longest = 0;
  for (std::size_t k = 0; k + 1 < starts.size(); ++k) longest = std::max(longest, starts[k + 1] - starts[k]);
  at::Tensor pos = at::tensor(positions, at::kLong);
  auto [gcos_all, gsin_all] = Rope(longest, D, c.global_rope_theta);
  auto [lcos_all, lsin_all] = Rope(longest, D, c.local_rope_theta);
  // Per-token cos/sin gathered by position within its window: [T, 1, D].
  const at::Tensor gcos = gcos_all.index_select(0, pos).unsqueeze(1), gsin = gsin_all.index_select(0, pos).unsqueeze(1);
  const at::Tensor lcos = lcos_all.index_select(0, pos).unsqueeze(1), lsin = lsin_all.index_select(0, pos).unsqueeze(1);
  at::Tensor x = at::embedding(w.t.at("model.embeddings.tok_embeddings.weight"), at::tensor(ids, at::kLong));
  x = w.Norm(x, "model.embeddings.norm", c.norm_eps);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const std::int64_t half = c.local_attention / 2;
  constexpr std::int64_t kBlock = 64;  // query block of the sliding-window layers
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const bool global = c.global_layers[static_cast<std::size_t>(i)];
    at::Tensor h = i == 0 ? x : w.Norm(x, p + "attn_norm", c.norm_eps);
    at::Tensor qkv = w.Linear(h, p + "attn.Wqkv").view({T, 3, H, D});  // all windows at once
    at::Tensor q = ApplyRope(qkv.select(1, 0), global ? gcos : lcos, global ? gsin : lsin);  // [T, H, D]
    at::Tensor k = ApplyRope(qkv.select(1, 1), global ? gcos : lcos, global ? gsin : lsin);
    at::Tensor v = qkv.select(1, 2);
    at::Tensor attn = at::empty({T, H, D});
    for (std::size_t win = 0; win + 1 < starts.size(); ++win) {
      const std::int64_t s0 = starts[win], len = starts[win + 1] - starts[win];
      const std::int64_t block = global ? len : kBlock;
      for (std::int64_t qs = 0; qs < len; qs += block) {
        const std::int64_t qn = std::min(block, len - qs);
        // Keys this query block can see: all of the window, or its band.
        const std::int64_t ks = global ? 0 : std::max<std::int64_t>(0, qs - half);
        const std::int64_t ke = global ? len : std::min(len, qs + qn + half);
        at::Tensor qb = q.narrow(0, s0 + qs, qn).transpose(0, 1);  // [H, qn, D]
        at::Tensor kb = k.narrow(0, s0 + ks, ke - ks).transpose(0, 1);
        at::Tensor vb = v.narrow(0, s0 + ks, ke - ks).transpose(0, 1);
        at::Tensor scores = at::matmul(qb, kb.transpose(-1, -2)) * scale;  // [H, qn, kn]
        if (!global) {
          at::Tensor qi = at::arange(qs, qs + qn, at::kLong).unsqueeze(1);
          at::Tensor ki = at::arange(ks, ke, at::kLong).unsqueeze(0);
          scores = scores.masked_fill((qi - ki).abs() > half, -std::numeric_limits<float>::infinity());
        }
        attn.narrow(0, s0 + qs, qn).copy_(at::matmul(at::softmax(scores, -1), vb).transpose(0, 1));
      }
    }
    x = x + w.Linear(attn.reshape({T, H * D}), p + "attn.Wo");
    at::Tensor wi = w.Linear(w.Norm(x, p + "mlp_norm", c.norm_eps), p + "mlp.Wi");
    auto parts = wi.chunk(2, -1);
    x = x + w.Linear(Activation(parts[0], c.activation) * parts[1], p + "mlp.Wo");
  }
  x = w.Norm(x, "model.final_norm", c.norm_eps);
  x = w.Norm(Activation(w.Linear(x, "head.dense"), c.classifier_activation), "head.norm", c.norm_eps);
  at::Tensor logits = w.Linear(x, "classifier").contiguous();  // [T, 2]
  at::Tensor s = logits.select(1, 0).contiguous(), e = logits.select(1, 1).contiguous();
  std::vector<SpanLogits> out(windows.size());
  for (std::size_t win = 0; win < windows.size(); ++win) {
    const float* sp = s.data_ptr<float>() + starts[win];
    const float* ep = e.data_ptr<float>() + starts[win];
    out[win].start.assign(sp, sp + (starts[win + 1] - starts[win]));
    out[win].end.assign(ep, ep + (starts[win + 1] - starts[win]));
  }
  return out;
}

}  // namespace ropeserve
