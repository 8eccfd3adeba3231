#include "server/models/decoder_weights.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/int8_linear.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/int4_weight.h"
#include "server/models/int4_checkpoint_loader.h"
#include "server/models/weight_loader.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve {

namespace {

// Unquantized projections on the CPU are packed for the packed GEMM
// (kernels/cpu/packed_linear.h), for every row count and ISA: bfloat16 (on
// AVX-512-BF16 it beats oneDNN and the former small-batch kernel at 1-512
// rows; elsewhere LibTorch 1.13's bf16 GEMM is a slow reference path) and
// float32 (the same bits for a row whatever its batch, on every ISA, and no
// OpenMP region in a step; docs/benchmarks.md).
bool PackWeights(at::Device device, DType dtype, Quantization quantization) {
  return device.is_cpu() && (dtype == DType::kBF16 || dtype == DType::kF32) && quantization == Quantization::kNone;
}

// Reads tensors by name and makes projections as the policy says.
class WeightReader {
 public:
  WeightReader(const Checkpoint& ckpt, const std::string& dir, const WeightPolicy& policy)
      : ckpt_(ckpt), dir_(dir), policy_(policy) {}

  // Each tensor goes to the device as it is read (int8 weights, CPU-only,
  // are read in float32 and quantized on the host).
  at::Tensor Load(const std::string& name) const { return LoadTensor(ckpt_, name, policy_.dtype).to(policy_.device); }
  at::Tensor LoadIf(bool present, const std::string& name) const { return present ? Load(name) : at::Tensor(); }

  // One projection from the modules `names` ("<name>.weight",
  // "<name>.bias"), stacked into one matrix in that order when several read
  // the same input (one kernel call and one pass over x). Int8 weights are
  // quantized from the checkpoint's values in float32 (not from their
  // rounding to the compute dtype), per row, so stacking first changes
  // nothing; their biases stay in float32, the int8 kernel's accumulation
  // type. Int4 weights likewise, per group; the LM head (`head`) as the
  // policy's int8_head and int4_head say. 4-bit weights are made on the
  // host and then moved. A 4-bit checkpoint's projections are read as
  // stored (server/models/int4_checkpoint_loader.h).
  StatusOr<LinearWeight> Linear(const std::vector<std::string>& names, bool has_bias, bool head = false) const {
    std::vector<at::Tensor> bs;
    for (const auto& name : names)
      if (has_bias) bs.push_back(Load(name + ".bias"));
    const at::Tensor bias = !has_bias ? at::Tensor() : bs.size() == 1 ? bs[0] : at::cat(bs, 0);
    // Int8 and int4 kernels take a float32 bias (their accumulation type).
    const at::Tensor bias32 = bias.defined() ? bias.to(at::kFloat) : at::Tensor();
    if (ckpt_.config().int4_weights && !head) return CheckpointInt4(names, bias32);
    const bool quantize = head ? policy_.quantized_head : policy_.int8 || policy_.int4;
    std::vector<at::Tensor> ws;
    for (const auto& name : names)
      ws.push_back(quantize ? LoadTensor(ckpt_, name + ".weight", at::kFloat) : Load(name + ".weight"));
    const at::Tensor w = ws.size() == 1 ? ws[0] : at::cat(ws, 0);
    if (policy_.pack) return LinearWeight{at::Tensor(), at::Tensor(), bias, cpu::PackWeight(w, policy_.dtype), {}, {}};
    // int4 needs whole groups of 32 columns; a projection whose input size
    // has none (no released model's) stays int8, as llama.cpp keeps such
    // tensors at 8 bits (on CUDA, without int8 kernels: 16 bits).
    const std::int64_t group = Int4KernelGroup(w.size(1));
    if (policy_.int4 && (!head || policy_.int4_head) && group > 0) {
      LinearWeight q{at::Tensor(), at::Tensor(), bias32, {}, {}, {}};
      q.int4 = Int4WeightOn(QuantizeInt4(w, group), policy_.device);
      return WithMmaLayout(std::move(q));
    }
    if (!quantize) return LinearWeight{w, at::Tensor(), bias, {}, {}, {}};
    if (!policy_.device.is_cpu())
      return LinearWeight{w.to(policy_.dtype).to(policy_.device), at::Tensor(), bias, {}, {}, {}};
    cpu::Int8Weight q = cpu::QuantizeInt8(w);
    return LinearWeight{q.q, q.scale, bias32, {}, {}, {}};
  }

 private:
  StatusOr<LinearWeight> CheckpointInt4(const std::vector<std::string>& names, const at::Tensor& bias32) const {
    std::vector<Int4Levels> parts;
    for (const auto& name : names) {
      RS_ASSIGN_OR_RETURN(Int4Levels part, ReadInt4Levels(ckpt_, *ckpt_.config().int4_weights, name));
      parts.push_back(std::move(part));
    }
    LinearWeight q{at::Tensor(), at::Tensor(), bias32, {}, {}, {}};
    RS_ASSIGN_OR_RETURN(q.int4, PackInt4Levels(parts, dir_ + ": " + names[0]));
    q.int4 = Int4WeightOn(std::move(q.int4), policy_.device);
    return WithMmaLayout(std::move(q));
  }

  LinearWeight WithMmaLayout(LinearWeight q) const {
    if (policy_.int4_mma && q.int4.packed.size(0) % 16 == 0) q.int4_mma = Int4MmaLayout(q.int4);
    return q;
  }

  const Checkpoint& ckpt_;
  const std::string& dir_;
  const WeightPolicy& policy_;
};

StatusOr<DecoderLayerWeights> LoadLayer(const WeightReader& r, const ModelConfig& c, const std::string& p) {
  DecoderLayerWeights lw;
  lw.input_layernorm = r.Load(p + "input_layernorm.weight");
  RS_ASSIGN_OR_RETURN(lw.qkv_proj,
                      r.Linear({p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"}, c.qkv_bias));
  lw.q_norm = r.LoadIf(c.qk_norm, p + "self_attn.q_norm.weight");
  lw.k_norm = r.LoadIf(c.qk_norm, p + "self_attn.k_norm.weight");
  RS_ASSIGN_OR_RETURN(lw.o_proj, r.Linear({p + "self_attn.o_proj"}, c.o_proj_bias));
  lw.post_attention_layernorm = r.Load(p + "post_attention_layernorm.weight");
  RS_ASSIGN_OR_RETURN(lw.gate_up_proj, r.Linear({p + "mlp.gate_proj", p + "mlp.up_proj"}, c.mlp_bias));
  RS_ASSIGN_OR_RETURN(lw.down_proj, r.Linear({p + "mlp.down_proj"}, c.mlp_bias));
  return lw;
}

// vLLM's classifier from a causal LM: the LM head's rows of the named
// tokens (their ids from the checkpoint's tokenizer.json).
StatusOr<at::Tensor> ScoreFromTokens(const WeightReader& r, const ModelConfig& c, const std::string& dir,
                                     const at::Tensor& embed_tokens, at::Device device) {
  RS_ASSIGN_OR_RETURN(auto tokenizer, tok::Tokenizer::FromPath(dir));
  std::vector<std::int64_t> ids;
  for (const std::string& t : c.classifier_from_token) {
    const std::optional<TokenId> id = tokenizer->TokenToId(t);
    if (!id || *id < 0 || *id >= c.vocab_size)
      return InvalidArgument(dir + ": classifier_from_token '" + t.substr(0, 100) +
                             "' is not a token of the model's vocabulary");
    ids.push_back(*id);
  }
  const at::Tensor head = c.tie_word_embeddings ? embed_tokens : r.Load("lm_head.weight");
  const at::Tensor rows = head.index_select(0, at::tensor(ids, at::kLong).to(device));
  return c.original_qwen3_reranker ? (rows[1] - rows[0]).unsqueeze(0).contiguous() : rows.contiguous();
}

// The model's head: a span head, a classifier, or the LM head (none for a
// trunk).
Status LoadHead(const WeightReader& r, const ModelConfig& c, const std::string& dir, const WeightPolicy& policy,
                DecoderWeights& w) {
  if (c.span_head) {
    w.qa_outputs = r.Load("qa_outputs.weight");
    w.qa_outputs_bias = r.Load("qa_outputs.bias");
  } else if (c.sequence_head && !c.classifier_from_token.empty()) {
    RS_ASSIGN_OR_RETURN(w.score, ScoreFromTokens(r, c, dir, w.embed_tokens, policy.device));
  } else if (c.sequence_head) {
    w.score = r.Load("score.weight");
  } else if (!c.base_model) {
    if (policy.EmbeddingInLmHead(c)) {
      RS_ASSIGN_OR_RETURN(w.lm_head, r.Linear({c.trunk_prefix + "embed_tokens"}, false, true));
    } else if (c.tie_word_embeddings) {
      w.lm_head = LinearWeight{w.embed_tokens, at::Tensor(), at::Tensor(), {}, {}, {}};
    } else {
      RS_ASSIGN_OR_RETURN(w.lm_head, r.Linear({"lm_head"}, false, true));
    }
  }
  return Status::Ok();
}

}  // namespace

WeightPolicy::WeightPolicy(DType dtype_in, Quantization quantization, at::Device device_in)
    : device(device_in),
      dtype(ToScalarType(dtype_in)),
      int8(quantization == Quantization::kInt8),
      int4(IsInt4(quantization)),
      int4_head(quantization == Quantization::kInt4All),
      pack(PackWeights(device_in, dtype_in, quantization)),
      // The LM head: int8 with int4 on the CPU; in the compute dtype on
      // CUDA, which has no int8 kernel (the head is then 16-bit, cuBLAS);
      // 4-bit with int4-all on both.
      int8_head(int8 || (int4 && !int4_head && device_in.is_cpu())),
      quantized_head(int8_head || int4_head) {}

StatusOr<bool> CudaInt4MmaFromEnvironment() {
  const char* v = std::getenv("ROPESERVE_CUDA_INT4_KERNEL");
  if (v == nullptr || *v == 0 || std::string(v) == "gemv") return false;
  if (std::string(v) == "mma") return true;
  return InvalidArgument(std::string("ROPESERVE_CUDA_INT4_KERNEL=") + v + ": expected gemv or mma");
}

bool WeightPolicy::EmbeddingInLmHead(const ModelConfig& c) const {
  return (quantized_head || pack) && !c.span_head && !c.sequence_head && !c.base_model && c.tie_word_embeddings;
}

StatusOr<DecoderWeights> LoadDecoderWeights(const Checkpoint& ckpt, const std::string& dir,
                                            const WeightPolicy& policy) {
  const ModelConfig& c = ckpt.config();
  const WeightReader r(ckpt, dir, policy);
  DecoderWeights w;
  const std::string& trunk = c.trunk_prefix;
  if (!policy.EmbeddingInLmHead(c)) w.embed_tokens = r.Load(trunk + "embed_tokens.weight");
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    RS_ASSIGN_OR_RETURN(DecoderLayerWeights lw, LoadLayer(r, c, trunk + "layers." + std::to_string(l) + "."));
    w.layers.push_back(std::move(lw));
  }
  w.norm = r.Load(trunk + "norm.weight");
  RS_RETURN_IF_ERROR(LoadHead(r, c, dir, policy, w));
  return w;
}

}  // namespace ropeserve
