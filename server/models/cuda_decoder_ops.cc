// DecoderOps on the CUDA kernels (kernels/cuda through torch_glue.h):
// float16 / bfloat16 tensors on one device, every launch on the current
// stream. Built only when the LibTorch found by CMake has CUDA; on CPU
// machines tests/cuda/compile_check.sh syntax-checks it against the
// LibTorch and CUDA headers. Not yet run on a GPU (issue 16).
#ifdef ROPESERVE_HAVE_CUDA

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/torch_glue.h"
#include "server/models/decoder_ops.h"

namespace ropeserve {
namespace {

class CudaDecoderOps final : public DecoderOps {
 public:
  at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) const override {
    return cuda::RmsNorm(x, weight, eps);
  }
  at::Tensor AddRmsNorm(const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                        double eps) const override {
    at::Tensor out = x.clone();  // the kernel normalizes in place
    cuda::FusedAddRmsNorm(out, residual, weight, eps);
    return out;
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
  at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const PagedBatch& batch, double scale) const override {
    // Both batch builders (the runner, ContiguousChunk) provide the rows.
    TORCH_CHECK(batch.row_seq.defined() && batch.row_context.defined(),
                "PagedAttention: the batch has no per-row attention metadata (row_seq, row_context)");
    return cuda::PagedAttention(q, k_cache, v_cache, batch.block_table_tensor, batch.row_seq, batch.row_context,
                                batch.max_context, scale);
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

}  // namespace ropeserve

#endif  // ROPESERVE_HAVE_CUDA
