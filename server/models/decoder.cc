#include "server/models/decoder.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <optional>
#include <string>

#include "server/models/decoder_weights.h"
#include "server/models/device.h"
#include "server/models/int4_checkpoint_loader.h"
#include "server/models/rotary.h"
#include "server/models/span_rows.h"
#include "server/models/weight_loader.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve {

namespace {

// The worker's device and compute dtype, and the quantization they allow.
Status CheckWorker(DType dtype, Quantization quantization, at::Device device) {
  if (device.is_cuda()) {
#ifndef ROPESERVE_HAVE_CUDA
    return InvalidArgument("this build has CPU workers only (its LibTorch has no CUDA)");
#endif
    RS_RETURN_IF_ERROR(CheckDeviceUsable(device));  // first: no GPU is the reason that matters
    if (dtype != DType::kF16 && dtype != DType::kBF16)
      return InvalidArgument("CUDA workers compute in float16 or bfloat16 (the CUDA kernels are 16-bit)");
    if (quantization == Quantization::kInt8)
      return InvalidArgument("int8 weights run on the CPU only (CUDA workers take int4, int4-all or none)");
    return Status::Ok();
  }
  if (!device.is_cpu()) return InvalidArgument("workers run on the CPU or a CUDA device");
  if (dtype == DType::kF16)
    return InvalidArgument(
        "float16 compute is not available on CPU (LibTorch has no float16 matrix multiply there): "
        "use --dtype bfloat16 (the same memory) or float32");
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    return InvalidArgument("compute dtype must be float32 or bfloat16");
  return Status::Ok();
}

// Hugging Face keeps inv_freq as a float32 buffer.
at::Tensor InvFreqTensor(const RopeFrequencies& rope) {
  return at::tensor(std::vector<double>(rope.inv_freq), at::kDouble).to(at::kFloat);
}

}  // namespace

StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::Load(const std::string& dir, DType dtype,
                                                           Quantization quantization, at::Device device) {
  return LoadAny(dir, dtype, Head::kLm, quantization, device);
}

StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::LoadSpanModel(const std::string& dir, DType dtype,
                                                                    at::Device device) {
  return LoadAny(dir, dtype, Head::kSpan, Quantization::kNone, device);
}

StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::LoadClassifier(const std::string& dir, DType dtype,
                                                                     at::Device device) {
  return LoadAny(dir, dtype, Head::kScore, Quantization::kNone, device);
}

StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::LoadTrunk(const std::string& dir, DType dtype,
                                                                at::Device device) {
  return LoadAny(dir, dtype, Head::kNone, Quantization::kNone, device);
}

StatusOr<Quantization> DecoderModel::CheckHead(const std::string& dir, const ModelConfig& c, Head head,
                                               Quantization quantization) {
  if (head == Head::kLm && c.base_model)
    return InvalidArgument(dir + ": " + c.architecture +
                           " is a base model without an LM head: it cannot generate (serve it with --encoder)");
  if (const auto& int4 = c.int4_weights) {
    // The checkpoint's own 4-bit weights, whatever --quantization says
    // (vLLM likewise takes the method from quantization_config); only int8
    // contradicts it.
    const std::string what = dir + ": a checkpoint of 4-bit " + std::string(Int4FormatName(int4->format)) + " weights";
    if (quantization == Quantization::kInt8)
      return InvalidArgument(what + " cannot be served with --quantization int8: use int4 or none");
    if (quantization != Quantization::kInt4All) quantization = Quantization::kInt4;
  }
  if (head != Head::kNone && c.span_head != (head == Head::kSpan))
    return InvalidArgument(dir + ": " + c.architecture +
                           (head == Head::kSpan ? " has no span head (qa_outputs): it is not an extractive QA model"
                                                : " is a span (extractive QA) model: serve it with --qa"));
  if (head != Head::kNone && c.sequence_head != (head == Head::kScore))
    return InvalidArgument(dir + ": " + c.architecture +
                           (head == Head::kScore ? " has no classifier (score): it is not a sequence classifier"
                                                 : " is a sequence classifier: serve it with --encoder"));
  return quantization;
}

StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::LoadAny(const std::string& dir, DType dtype, Head head,
                                                              Quantization quantization, at::Device device) {
  RS_RETURN_IF_ERROR(CheckWorker(dtype, quantization, device));
  RS_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(dir, head == Head::kNone));
  RS_ASSIGN_OR_RETURN(quantization, CheckHead(dir, ckpt->config(), head, quantization));
  c10::InferenceMode guard;
  std::unique_ptr<DecoderModel> m(new DecoderModel());
  m->config_ = ckpt->config();
  m->dtype_ = dtype;
  m->quantization_ = quantization;
  const ModelConfig& c = m->config_;
  WeightPolicy policy(dtype, quantization, device);
  if (device.is_cuda()) {
    RS_ASSIGN_OR_RETURN(policy.int4_mma, CudaInt4MmaFromEnvironment());
  }
  RS_ASSIGN_OR_RETURN(m->w_, LoadDecoderWeights(*ckpt, dir, policy));

#ifdef ROPESERVE_HAVE_CUDA
  m->ops_ = device.is_cuda() ? MakeCudaDecoderOps() : MakeCpuDecoderOps();
#else
  m->ops_ = MakeCpuDecoderOps();
#endif
  RopeFrequencies rope = ComputeRopeFrequencies(c);
  m->inv_freq_ = InvFreqTensor(rope).to(device);
  m->attention_factor_ = rope.attention_factor;
  m->attention_scale_ = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  // Only generation runs paged forwards; span, score and trunk models build
  // their windows' tables in ForwardSpans.
  if (head == Head::kLm && device.is_cuda() && !RopeDependsOnLength(c)) {
    const at::Tensor every = at::arange(c.max_position_embeddings, at::TensorOptions().dtype(at::kLong).device(device));
    auto [cos, sin] = m->RotaryCosSin(every);
    m->rope_cache_ = m->ops_->PrepareRope(cos, sin).packed;
  }
  return m;
}

at::Tensor DecoderModel::Embed(const at::Tensor& ids) const {
  return ops_->Embed(w_.embed_tokens, w_.lm_head, ids, ToScalarType(dtype_));
}

// The final RMSNorm and the LM head.
at::Tensor DecoderModel::Logits(const at::Tensor& hidden) const {
  return ops_->ToFloat(ops_->Linear(ops_->RmsNorm(hidden.contiguous(), w_.norm, config_.rms_norm_eps), w_.lm_head));
}

std::pair<at::Tensor, at::Tensor> DecoderModel::RotaryCosSin(const at::Tensor& positions, std::int64_t length) const {
  at::Tensor inv_freq = inv_freq_;
  double factor = attention_factor_;
  if (RopeDependsOnLength(config_)) {
    // Dynamic NTK: frequencies follow the length reached by this forward, as
    // Hugging Face's dynamic_rope_update does for a single growing sequence.
    const std::int64_t seq_len = length > 0 ? length : positions.max().item<std::int64_t>() + 1;
    RopeFrequencies rope = ComputeRopeFrequencies(config_, seq_len);
    inv_freq = InvFreqTensor(rope).to(positions.device());
    factor = rope.attention_factor;
  }
  return RotaryTable(inv_freq, positions, factor, RotaryLayout::kRotateHalf, at::kFloat, ToScalarType(dtype_));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> DecoderModel::Qkv(const DecoderLayerWeights& w,
                                                                 const at::Tensor& x) const {
  const std::int64_t T = x.size(0), D = config_.head_dim;
  const at::Tensor qkv = ops_->Linear(x, w.qkv_proj);
  const std::int64_t qs = config_.q_size(), kvs = config_.kv_size();
  // Views of the projection (rows contiguous inside): the op set copies
  // what its kernels need contiguous (the CPU's RoPE); CUDA's RoPE, cache
  // write and attention read the rows where they are, three copy kernels a
  // layer fewer.
  at::Tensor q = qkv.narrow(1, 0, qs).view({T, config_.num_attention_heads, D});
  at::Tensor k = qkv.narrow(1, qs, kvs).view({T, config_.num_key_value_heads, D});
  at::Tensor v = qkv.narrow(1, qs + kvs, kvs).view({T, config_.num_key_value_heads, D});
  if (config_.qk_norm) {
    q = ops_->RmsNorm(q.contiguous(), w.q_norm, config_.rms_norm_eps);
    k = ops_->RmsNorm(k.contiguous(), w.k_norm, config_.rms_norm_eps);
  }
  return {q, k, v};
}

at::Tensor DecoderModel::Mlp(const DecoderLayerWeights& w, const at::Tensor& x) const {
  return ops_->Linear(ops_->SiluAndMul(ops_->Linear(x, w.gate_up_proj)), w.down_proj);
}

// A layer after its attention: the output projection, the residual add
// folded into the post-attention norm (h updated in place), and the MLP,
// whose output is returned, not yet added to h.
at::Tensor DecoderModel::LayerTail(const DecoderLayerWeights& w, const at::Tensor& attn, at::Tensor& h) const {
  at::Tensor o = ops_->Linear(attn, w.o_proj).contiguous();
  at::Tensor y = ops_->AddRmsNorm(o, h, w.post_attention_layernorm, config_.rms_norm_eps);
  return Mlp(w, y).contiguous();
}

std::vector<at::Tensor> DecoderModel::RunLayers(at::Tensor h, const AttendFn& attend,
                                                const std::vector<at::Tensor>& outputs) const {
  const std::int64_t T = h.size(0);
  const double eps = config_.rms_norm_eps;
  h = h.contiguous();
  at::Tensor mlp;  // the previous layer's MLP output, not yet added to h
  std::vector<at::Tensor> out;
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const auto& w = w_.layers[l];
    // Residual adds folded into the next norm (h updated in place, rounded
    // to the dtype as `h = h + y` is, then normalized): the MLP's into the
    // next layer's input norm, the attention's into the post-attention
    // norm. Same bits as separate adds, one elementwise pass (a kernel on
    // a GPU) fewer a layer.
    at::Tensor x =
        mlp.defined() ? ops_->AddRmsNorm(mlp, h, w.input_layernorm, eps) : ops_->RmsNorm(h, w.input_layernorm, eps);
    auto [q, k, v] = Qkv(w, x);
    at::Tensor attn = attend(l, q, k, v).reshape({T, config_.q_size()});
    if (l + 1 < w_.layers.size() || outputs.empty()) {
      mlp = LayerTail(w, attn, h);
      continue;
    }
    // The last layer past its attention only for the rows asked for, each
    // set apart (its rows' bits do not depend on the other sets').
    for (const at::Tensor& rows : outputs) {
      at::Tensor hr = h.index_select(0, rows);
      hr.add_(LayerTail(w, attn.index_select(0, rows), hr));
      out.push_back(std::move(hr));
    }
  }
  if (!outputs.empty()) return out;
  if (mlp.defined()) h.add_(mlp);
  return {h};
}

// Each sequence's rows reach its context length (its chunk ends there).
// Dynamic RoPE reads the sequences' lengths on the host (a copy from a GPU:
// such models run eagerly there).
std::pair<at::Tensor, at::Tensor> DecoderModel::CosSinPacked(const PagedBatch& batch) const {
  if (!RopeDependsOnLength(config_)) return RotaryCosSin(batch.positions);
  const at::Tensor starts = batch.query_start.to(at::kCPU), contexts = batch.context_len_tensor.to(at::kCPU);
  const std::int64_t* start = starts.data_ptr<std::int64_t>();
  const std::int64_t* context = contexts.data_ptr<std::int64_t>();
  std::vector<at::Tensor> cos, sin;
  for (std::int64_t s = 0; s < contexts.numel(); ++s) {
    auto [c, si] = RotaryCosSin(batch.positions.narrow(0, start[s], start[s + 1] - start[s]), context[s]);
    cos.push_back(c);
    sin.push_back(si);
  }
  return {at::cat(cos, 0), at::cat(sin, 0)};
}

// The cached table's row for each token is its position's (the kernel reads
// cos_sin[rows[t]]): the same numbers as a table built for the step's
// positions, with no kernel to build it.
RopeTable DecoderModel::PagedRope(const PagedBatch& batch) const {
  if (!rope_cache_.defined()) {
    auto [cos, sin] = CosSinPacked(batch);
    return ops_->PrepareRope(cos, sin);
  }
  return RopeTable{{}, {}, rope_cache_, batch.positions};
}

bool DecoderModel::CanCaptureGraphs() const { return device().is_cuda() && !RopeDependsOnLength(config_); }

at::Tensor DecoderModel::ForwardPaged(const PagedBatch& batch, PagedKvCache& cache, at::Tensor* prompt_logits) const {
  return ForwardPagedWith(
      batch, cache, prompt_logits,
      [&](const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const PagedBatch& b) {
        return ops_->PagedAttention(q, k_cache, v_cache, b, attention_scale_);
      });
}

at::Tensor DecoderModel::AttentionWorkspace(const PagedBatch& batch) const {
  return ops_->AttentionWorkspace(batch, batch.token_ids.size(0), config_.num_attention_heads, config_.head_dim);
}

at::Tensor DecoderModel::ForwardPagedWith(const PagedBatch& batch, PagedKvCache& cache, at::Tensor* prompt_logits,
                                          const PagedAttentionFn& attend) const {
  c10::InferenceMode guard;
  const RopeTable rope = PagedRope(batch);
  // One attention workspace for every layer (none on the CPU): the
  // caller's, or one allocated here on a copy of the batch.
  std::optional<PagedBatch> with_workspace;
  if (!batch.attention_workspace.defined()) {
    at::Tensor w = AttentionWorkspace(batch);
    if (w.defined()) {
      with_workspace.emplace(batch);
      with_workspace->attention_workspace = std::move(w);
    }
  }
  const PagedBatch& b = with_workspace ? *with_workspace : batch;
  // The last layer's output projection and MLP run only for the rows whose
  // logits are wanted (a prompt's other rows only feed the KV cache, as
  // llama.cpp's output ids): ~1/L of a prefill's work. A decode step wants
  // every row (padding included) and keeps its one pass over all rows.
  const bool prompt =
      prompt_logits != nullptr && batch.prompt_logits_indices.defined() && batch.prompt_logits_indices.numel() > 0;
  const bool every_row = !prompt && batch.logits_indices.numel() == batch.token_ids.size(0);
  std::vector<at::Tensor> outputs;
  if (!every_row) outputs.push_back(batch.logits_indices);
  if (prompt) outputs.push_back(batch.prompt_logits_indices);
  std::vector<at::Tensor> h = RunLayers(
      Embed(batch.token_ids),
      [&](size_t l, at::Tensor q, at::Tensor k, const at::Tensor& v) {
        ops_->RopeAndWriteKvCache(q, k, v, rope, cache.k[l], cache.v[l], b);
        return attend(q, cache.k[l], cache.v[l], b);
      },
      outputs);
  if (prompt) *prompt_logits = Logits(h[1]).contiguous();
  return Logits(every_row ? h[0].index_select(0, batch.logits_indices) : h[0]);
}

std::vector<SpanLogits> DecoderModel::ForwardSpans(const std::vector<std::vector<std::int64_t>>& windows,
                                                   bool with_hidden) const {
  c10::InferenceMode guard;
  // Each window on tensors of its own shape (positions restart, attention is
  // causal within it): its logits then do not depend on the other windows,
  // as a shared GEMM's rounding would make them.
  std::vector<SpanLogits> out;
  out.reserve(windows.size());
  const at::Device device = w_.norm.device();
  for (const auto& window : windows) {
    const auto len = static_cast<std::int64_t>(window.size());
    // The window is one sequence whose cache is its own keys: one block of
    // `len` slots, every query causal within it; the device's attention op.
    PagedBatch one = ContiguousChunk(window, 0, 1, device);
    one.attention_workspace = ops_->AttentionWorkspace(one, len, config_.num_attention_heads, config_.head_dim);
    auto [cos, sin] = RotaryCosSin(one.positions, len);
    const RopeTable rope = ops_->PrepareRope(cos, sin);
    // A sequence classifier reads the last token's row only: the last
    // layer's tail runs for it alone unless the hidden states are asked for.
    std::vector<at::Tensor> last;
    if (w_.score.defined() && !with_hidden) last.push_back(one.logits_indices.narrow(0, len - 1, 1));
    at::Tensor hidden = RunLayers(
        Embed(one.token_ids),
        [&](size_t, at::Tensor q, at::Tensor k, const at::Tensor& v) {
          ops_->ApplyRope(q, k, rope);
          // q as ApplyRope left it (the CPU's contiguous copy, CUDA's view
          // of the projection, which its attention reads in place).
          return ops_->PagedAttention(q, k.contiguous().unsqueeze(0), v.contiguous().unsqueeze(0), one,
                                      attention_scale_);
        },
        last)[0];
    hidden = ops_->RmsNorm(hidden, w_.norm, config_.rms_norm_eps);
    if (w_.score.defined()) {  // a sequence classifier: the last token's logits
      out.push_back(SpanRows(at::Tensor(), 0, len, with_hidden ? hidden : at::Tensor()));
      SetClasses(out.back(), at::linear(hidden.narrow(0, hidden.size(0) - 1, 1), w_.score));
      continue;
    }
    if (!w_.qa_outputs.defined()) {  // a trunk: its hidden state is the output
      out.push_back(SpanRows(at::Tensor(), 0, len, hidden));
      continue;
    }
    const at::Tensor logits = at::linear(hidden, w_.qa_outputs, w_.qa_outputs_bias).contiguous();
    out.push_back(SpanRows(logits, 0, len, with_hidden ? hidden : at::Tensor()));
  }
  return out;
}

PagedKvCache DecoderModel::AllocatePagedKvCache(std::int64_t num_blocks, std::int64_t block_size) const {
  PagedKvCache cache;
  const auto opts = w_.norm.options();  // the compute dtype
  for (std::int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    // Uninitialised: attention only reads slots below each context length.
    cache.k.push_back(at::empty({num_blocks, block_size, config_.num_key_value_heads, config_.head_dim}, opts));
    cache.v.push_back(at::empty({num_blocks, block_size, config_.num_key_value_heads, config_.head_dim}, opts));
  }
  return cache;
}

std::int64_t DecoderModel::KvBytesPerToken() const {
  return 2 * config_.num_hidden_layers * config_.kv_size() * static_cast<std::int64_t>(w_.norm.element_size());
}

}  // namespace ropeserve
