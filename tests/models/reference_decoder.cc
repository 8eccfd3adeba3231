#include "tests/models/reference_decoder.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "kernels/cpu/int8_linear.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/int4_weight.h"
#include "kernels/reference/reference_ops.h"
#include "server/models/span_rows.h"

namespace ropeserve::testing {

at::Tensor Dense(const LinearWeight& w, at::ScalarType dtype) {
  if (w.packed.defined()) return cpu::UnpackWeight(w.packed).to(dtype);
  if (w.is_int4()) return DequantizeInt4(w.int4, dtype);
  return w.int8() ? cpu::DequantizeInt8(cpu::Int8Weight{w.weight, w.scale}, dtype) : w.weight;
}

double Int4ActivationUnit() { return cpu::ActiveKernels().int4_int8_x ? 1.0 / 254 : 0x1p-15; }

at::Tensor EmbeddingTable(const DecoderModel& m, at::ScalarType dtype) {
  const DecoderWeights& w = m.weights();
  return w.embed_tokens.defined() ? w.embed_tokens.to(dtype) : Dense(w.lm_head, dtype);
}

namespace {

// Int8 and int4 weights: float32 maths on exactly the weights they
// represent (q * scale, not rounded to the compute dtype), the result in
// x's dtype.
at::Tensor Linear(const at::Tensor& x, const LinearWeight& w) {
  if (w.int8() || w.is_int4()) {
    const at::Tensor y = at::linear(x.to(at::kFloat), Dense(w, at::kFloat));
    return (w.bias.defined() ? y + w.bias.to(at::kFloat) : y).to(x.scalar_type());
  }
  const at::Tensor dense = Dense(w, x.scalar_type());
  return w.bias.defined() ? at::linear(x, dense, w.bias) : at::linear(x, dense);
}

// Embedded ids through every layer and the final norm: [T, H].
at::Tensor DenseHidden(const DecoderModel& m, const at::Tensor& ids) {
  const ModelConfig& c = m.config();
  const DecoderWeights& w = m.weights();
  const double eps = c.rms_norm_eps;
  const std::int64_t T = ids.size(0), D = c.head_dim;
  auto [cos, sin] = m.RotaryCosSin(at::arange(T, at::TensorOptions().dtype(at::kLong).device(m.device())));
  const at::ScalarType dtype = w.norm.scalar_type();
  at::Tensor h = at::embedding(EmbeddingTable(m, dtype), ids);
  for (const DecoderLayerWeights& lw : w.layers) {
    const at::Tensor x = reference::RmsNorm(h, lw.input_layernorm, eps);
    const at::Tensor qkv = Linear(x, lw.qkv_proj);  // q, k, v columns
    at::Tensor q = qkv.narrow(1, 0, c.q_size()).reshape({T, c.num_attention_heads, D});
    at::Tensor k = qkv.narrow(1, c.q_size(), c.kv_size()).reshape({T, c.num_key_value_heads, D});
    const at::Tensor v = qkv.narrow(1, c.q_size() + c.kv_size(), c.kv_size()).reshape({T, c.num_key_value_heads, D});
    if (c.qk_norm) {
      q = reference::RmsNorm(q, lw.q_norm, eps);
      k = reference::RmsNorm(k, lw.k_norm, eps);
    }
    q = reference::ApplyRope(q, cos, sin);
    k = reference::ApplyRope(k, cos, sin);
    const at::Tensor attn = reference::CausalAttention(q, k, v, m.attention_scale()).reshape({T, c.q_size()});
    h = h + Linear(attn, lw.o_proj);
    const at::Tensor y = reference::RmsNorm(h, lw.post_attention_layernorm, eps);
    const at::Tensor gate_up = Linear(y, lw.gate_up_proj);  // gate, up columns
    const std::int64_t I = c.intermediate_size;
    h = h + Linear(at::silu(gate_up.narrow(1, 0, I)) * gate_up.narrow(1, I, I), lw.down_proj);
  }
  return reference::RmsNorm(h, w.norm, eps);
}

}  // namespace

at::Tensor ReferenceForward(const DecoderModel& m, const at::Tensor& ids) {
  c10::InferenceMode guard;
  return Linear(DenseHidden(m, ids.to(m.device())), m.weights().lm_head).to(at::kFloat);
}

SpanLogits ReferenceSpanWindow(const DecoderModel& m, const std::vector<TokenId>& window, bool with_hidden) {
  c10::InferenceMode guard;
  const at::Tensor hidden =
      DenseHidden(m, at::tensor(std::vector<std::int64_t>(window.begin(), window.end()), at::kLong));
  const auto len = static_cast<std::int64_t>(window.size());
  if (m.weights().score.defined()) {  // a sequence classifier: the last token
    SpanLogits out = SpanRows(at::Tensor(), 0, len, with_hidden ? hidden : at::Tensor());
    SetClasses(out, at::linear(hidden.narrow(0, len - 1, 1), m.weights().score));
    return out;
  }
  if (!m.weights().qa_outputs.defined()) return SpanRows(at::Tensor(), 0, len, hidden);
  const at::Tensor logits = at::linear(hidden, m.weights().qa_outputs, m.weights().qa_outputs_bias).contiguous();
  return SpanRows(logits, 0, static_cast<std::int64_t>(window.size()), with_hidden ? hidden : at::Tensor());
}

at::Tensor ReferenceAttentionModel::ForwardPaged(const PagedBatch& batch, PagedKvCache& cache,
                                                 at::Tensor* prompt_logits) const {
  return m_.ForwardPagedWith(
      batch, cache, prompt_logits,
      [&](const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const PagedBatch& b) {
        // The lengths from the attention contract's tensors (what every
        // device's kernel reads), checked for consistency on every step:
        // rows in order covering the batch, each sequence's rows within its
        // context, no context above max_context.
        const at::Tensor starts = b.query_start.to(at::kCPU), contexts = b.context_len_tensor.to(at::kCPU);
        const std::int64_t S = contexts.numel();
        std::vector<std::int64_t> query_lens, context_lens;
        TORCH_CHECK(starts.numel() == S + 1 && starts[0].item<std::int64_t>() == 0 &&
                        starts[S].item<std::int64_t>() == b.token_ids.size(0),
                    "query_start does not cover the batch's rows");
        for (std::int64_t s = 0; s < S; ++s) {
          const std::int64_t n = starts[s + 1].item<std::int64_t>() - starts[s].item<std::int64_t>();
          const std::int64_t c = contexts[s].item<std::int64_t>();
          TORCH_CHECK(n >= 1 && n <= c && c <= b.max_context, "sequence ", s, ": ", n, " rows, context ", c,
                      ", max_context ", b.max_context);
          query_lens.push_back(n);
          context_lens.push_back(c);
        }
        // Each sequence's blocks: the first ceil(context / block_size) of its row.
        const std::int64_t bs = k_cache.size(1);
        const at::Tensor rows = b.block_table_tensor.to(at::kCPU).contiguous();
        std::vector<std::vector<std::int32_t>> tables;
        for (std::size_t s = 0; s < context_lens.size(); ++s) {
          const std::int32_t* row = rows[static_cast<std::int64_t>(s)].data_ptr<std::int32_t>();
          tables.emplace_back(row, row + (context_lens[s] + bs - 1) / bs);
        }
        return reference::PagedAttention(q, k_cache, v_cache, tables, query_lens, context_lens, m_.attention_scale());
      });
}

std::vector<TokenId> ReferenceGreedy(const DecoderModel& m, const std::vector<TokenId>& prompt, int n) {
  std::vector<std::int64_t> seq(prompt.begin(), prompt.end());
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) {
    at::Tensor logits = ReferenceForward(m, at::tensor(seq, at::kLong));
    at::Tensor last = logits[logits.size(0) - 1].contiguous();
    const float* p = last.data_ptr<float>();
    const auto next = static_cast<TokenId>(std::max_element(p, p + last.numel()) - p);
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

at::Tensor PagedLogits(const PagedModel& m, const std::vector<std::int64_t>& ids) {
  const std::vector<std::int64_t> chunks{7, 1, 5, 1, 1, 12};
  constexpr std::int64_t kBlock = 4;
  const auto n = static_cast<std::int64_t>(ids.size());
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  PagedKvCache cache = m.AllocatePagedKvCache(blocks + 1, kBlock);
  std::vector<at::Tensor> parts;
  std::int64_t pos = 0;
  for (std::size_t c = 0; pos < n; ++c) {
    const std::int64_t len = std::min<std::int64_t>(c < chunks.size() ? chunks[c] : 3, n - pos);
    const std::vector<std::int64_t> tokens(ids.begin() + pos, ids.begin() + pos + len);
    parts.push_back(m.ForwardPaged(ContiguousChunk(tokens, pos, blocks, m.device()), cache, nullptr));
    pos += len;
  }
  return at::cat(parts, 0);
}

}  // namespace ropeserve::testing
