// LibTorch glue for kernels/cuda: checks shapes, dtypes and devices, then
// calls the raw-pointer kernels on the current CUDA stream. Compiled only
// when the LibTorch found by CMake has CUDA (ROPESERVE_HAVE_CUDA). Errors
// are thrown as c10::Error (TORCH_CHECK), like LibTorch's own ops.
#pragma once

#include <ATen/core/Tensor.h>

namespace ropeserve::cuda {

// k, v: [T, Hkv, D] (rows may be strided); caches [blocks, block_size, Hkv, D].
void ReshapeAndCache(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
                     const at::Tensor& slot_mapping);
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);
// residual += x (rounded); x = RmsNorm(residual). Both [rows, hidden], contiguous.
void FusedAddRmsNorm(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps);
// gate_up [T, 2 I] (gate, then up) -> silu(gate) * up [T, I] (see kernels.h).
at::Tensor SiluAndMul(const at::Tensor& gate_up);
// q: [T, Hq, D], k: [T, Hkv, D] in place; cos_sin: float32 [max_pos, rotary_dim].
void RotaryEmbedding(const at::Tensor& positions, at::Tensor& q, at::Tensor& k, const at::Tensor& cos_sin);
// Decode and prefill-chunk rows over the paged cache (see kernels.h).
at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                          const at::Tensor& block_tables, const at::Tensor& row_seq, const at::Tensor& row_context,
                          std::int64_t max_context, double scale, std::int64_t partition_size = 512);
// logits float32 [R, V]; per-row parameters [R]; returns int64 [R].
at::Tensor SampleRows(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& top_k,
                      const at::Tensor& top_p, const at::Tensor& min_p, const at::Tensor& seed,
                      const at::Tensor& offset);

}  // namespace ropeserve::cuda
