// DecoderOps on the CUDA kernels (kernels/cuda through torch_glue.h):
// float16 / bfloat16 tensors on one device, every launch on the current
// stream. Built only when the LibTorch found by CMake has CUDA; on CPU
// machines tests/cuda/compile_check.sh syntax-checks it against the
// LibTorch and CUDA headers; scripts/test-debian13 links it against CUDA
// LibTorch 2.6; run on an H200 by scripts/gpu-check (docs/gpu.md).
#ifdef ROPESERVE_HAVE_CUDA

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/torch_glue.h"
#include "kernels/int4_weight.h"
#include "server/models/decoder_ops.h"

namespace ropeserve {
namespace {

class CudaDecoderOps final : public DecoderOps {
 public:
  at::Tensor Linear(const at::Tensor& x, const LinearWeight& w) const override {
    TORCH_CHECK(!w.int8() && !w.packed.defined(), "CUDA projections take 16-bit or 4-bit weights");
    if (w.is_int4()) {
      // Few rows (decode, verification, graph-replayed batches): a 4-bit
      // kernel reads each weight once: the tensor-core one to 64 rows when
      // the weights are in its layout too (ROPESERVE_CUDA_INT4_KERNEL=mma),
      // else the matrix-vector one to 16. More (prefill): the generic path,
      // the weights dequantized to x's dtype for cuBLAS (compute-bound
      // there; the copy is transient).
      const Int4Weight& q = w.int4;
      const std::int64_t rows = x.size(0);
      const bool mma = w.int4_mma.packed.defined() && rows <= cuda::kInt4MmaMaxRows;
      if (mma || rows <= cuda::kInt4GemvMaxRows) {
        const at::Tensor xk = q.perm.defined() ? x.index_select(1, q.perm) : x;  // the kernels' column order
        if (mma) {
          const Int4MmaWeight& m = w.int4_mma;
          return cuda::Int4MmaLinear(xk, m.packed, m.scale, m.zero, m.k, m.group_size, w.bias);
        }
        return cuda::Int4Linear(xk, q.packed, q.scale, q.zero, q.k, q.group_size, w.bias);
      }
      return Int4DequantizedLinear(x, w.int4, w.bias);
    }
    return w.bias.defined() ? at::linear(x, w.weight, w.bias) : at::linear(x, w.weight);  // cuBLAS
  }
  at::Tensor Embed(const at::Tensor& table, const LinearWeight& lm_head, const at::Tensor& ids,
                   at::ScalarType dtype) const override {
    // A tied 4-bit head (int4-all) holds the embedding: its rows dequantized.
    if (!table.defined() && lm_head.is_int4()) return Int4Rows(lm_head.int4, ids, dtype);
    TORCH_CHECK(table.defined(), "CUDA embeddings keep their table unless a tied 4-bit head holds it");
    return at::embedding(table, ids);
  }
  at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) const override {
    return cuda::RmsNorm(x, weight, eps);
  }
  at::Tensor AddRmsNorm(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps) const override {
    cuda::FusedAddRmsNorm(x, residual, weight, eps);  // x is normalized in place
    return x;
  }
  at::Tensor SiluAndMul(const at::Tensor& gate_up) const override { return cuda::SiluAndMul(gate_up); }
  RopeTable PrepareRope(const at::Tensor& cos, const at::Tensor& sin) const override {
    // The kernel reads cos_sin[positions[t]] as [cos(f_0..f_F-1), sin(f_0..f_F-1)]
    // in float32; the decoder's per-row tables repeat the F angles twice
    // (rotate-half) and already include the position and the attention
    // factor, so row t of [cos[:, :F], sin[:, :F]] at "position" t is it.
    // Built once per forward (three kernels), not in every layer.
    const std::int64_t F = cos.size(1) / 2, T = cos.size(0);
    RopeTable table{cos, sin, {}, {}};
    table.packed = at::cat({cos.narrow(1, 0, F), sin.narrow(1, 0, F)}, 1).to(at::kFloat).contiguous();
    table.rows = at::arange(T, at::TensorOptions().dtype(at::kLong).device(cos.device()));
    return table;
  }
  void ApplyRope(at::Tensor& q, at::Tensor& k, const RopeTable& rope) const override {
    TORCH_CHECK(rope.packed.defined(), "ApplyRope: a RopeTable from this op set's PrepareRope");
    cuda::RotaryEmbedding(rope.rows, q, k, rope.packed);
  }
  void WriteKvCache(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
                    const PagedBatch& batch) const override {
    cuda::ReshapeAndCache(k, v, k_cache, v_cache, batch.slot_mapping);
  }
  void RopeAndWriteKvCache(at::Tensor& q, at::Tensor& k, const at::Tensor& v, const RopeTable& rope,
                           at::Tensor& k_cache, at::Tensor& v_cache, const PagedBatch& batch) const override {
    TORCH_CHECK(rope.packed.defined(), "RopeAndWriteKvCache: a RopeTable from this op set's PrepareRope");
    cuda::RopeAndCache(rope.rows, q, k, v, k_cache, v_cache, batch.slot_mapping, rope.packed);
  }
  at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const PagedBatch& batch, double scale) const override {
    return cuda::PagedAttention(q, k_cache, v_cache, batch.block_table_tensor, batch.query_start,
                                batch.context_len_tensor, batch.max_context, scale, batch.attention_workspace,
                                cuda::PartitionSizeForRows(q.size(0)));
  }
  at::Tensor AttentionWorkspace(const PagedBatch& batch, std::int64_t rows, std::int64_t heads,
                                std::int64_t head_dim) const override {
    return cuda::PartitionedAttentionWorkspace(rows, heads, head_dim, batch.max_context,
                                               batch.token_ids.options().dtype(at::kFloat));
  }
};

}  // namespace

std::unique_ptr<DecoderOps> MakeCudaDecoderOps() { return std::make_unique<CudaDecoderOps>(); }

DeviceMemory GetDeviceMemory(at::Device device) {
  const c10::cuda::CUDAGuard guard(device);
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return {};
  return {static_cast<std::int64_t>(free), static_cast<std::int64_t>(total)};
}

AllocatorBytes GetAllocatorBytes(at::Device device) {
  // Index 0 of the stat arrays is the aggregate over pool types (StatType::
  // AGGREGATE) in LibTorch 1.13 and 2.x alike.
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  return {static_cast<std::int64_t>(stats.allocated_bytes[0].current),
          static_cast<std::int64_t>(stats.allocated_bytes[0].peak)};
}

void ResetAllocatorPeak(at::Device device) { c10::cuda::CUDACachingAllocator::resetPeakStats(device.index()); }

}  // namespace ropeserve

#endif  // ROPESERVE_HAVE_CUDA
