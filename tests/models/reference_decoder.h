// The decoder's oracles, in tests only (they run on kernels/reference,
// which the server does not link):
//  - ReferenceForward: the dense forward of one sequence, no cache, no
//    batching, the unfused reference ops, as Hugging Face's eager modules
//    (on the model's device, as PagedLogits);
//  - ReferenceSpanWindow: a decoder span model's window the same way;
//  - ReferenceAttentionModel: the serving forward with the gather-based
//    reference paged attention instead of the CPU kernel, behind the same
//    PagedModel interface, so ModelRunner and the engine run over it;
//  - ReferenceGreedy / PagedLogits: greedy decoding by dense recompute, and
//    the paged forward of one sequence fed in uneven chunks.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "server/common/token_id.h"
#include "server/models/decoder.h"

namespace ropeserve::testing {

// A projection's weight as the dense [N, K] matrix it stands for, in
// `dtype` (packed panels unpacked, int8 / int4 dequantized).
at::Tensor Dense(const LinearWeight& w, at::ScalarType dtype);
// The token embedding [V, H] in `dtype`: embed_tokens, or (a tied one held
// by a packed or quantized LM head) that head's rows.
at::Tensor EmbeddingTable(const DecoderModel& m, at::ScalarType dtype);

// How far the int4 kernel's activation levels may be from x, per element,
// relative to the largest |x| of its row: half a level of 16383 per row
// (int16 x, 2^-15) or of 127 per group (the active ISA's int8-x form,
// kernels/cpu/kernel_table.h: 1/254).
double Int4ActivationUnit();

// ids: [T] int64 at positions 0..T-1 -> float32 logits [T, V].
at::Tensor ReferenceForward(const DecoderModel& m, const at::Tensor& ids);

// A span model's window (m loaded with DecoderModel::LoadSpanModel).
SpanLogits ReferenceSpanWindow(const DecoderModel& m, const std::vector<TokenId>& window, bool with_hidden = false);

class ReferenceAttentionModel final : public PagedModel {
 public:
  explicit ReferenceAttentionModel(const DecoderModel& m) : m_(m) {}
  const ModelConfig& config() const override { return m_.config(); }
  at::Device device() const override { return m_.device(); }
  PagedKvCache AllocatePagedKvCache(std::int64_t num_blocks, std::int64_t block_size) const override {
    return m_.AllocatePagedKvCache(num_blocks, block_size);
  }
  at::Tensor ForwardPaged(const PagedBatch& batch, PagedKvCache& cache, at::Tensor* prompt_logits) const override;

 private:
  const DecoderModel& m_;
};

// `n` greedy tokens after `prompt`, recomputing the whole sequence densely
// (ReferenceForward) at every step; ties go to the lowest id, as the
// sampler's greedy.
std::vector<TokenId> ReferenceGreedy(const DecoderModel& m, const std::vector<TokenId>& prompt, int n);

// The logits of every position of `ids`, fed through m.ForwardPaged in
// uneven chunks (a prefill, single tokens, multi-token chunks that attend
// to the cached prefix): the serving path's numbers for one sequence.
at::Tensor PagedLogits(const PagedModel& m, const std::vector<std::int64_t>& ids);

}  // namespace ropeserve::testing
