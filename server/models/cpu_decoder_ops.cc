// DecoderOps on the CPU kernels (kernels/cpu): float32 and bfloat16.
#include <ATen/ATen.h>

#include "kernels/cpu/fused_ops.h"
#include "kernels/cpu/paged_attention.h"
#include "server/models/decoder_ops.h"

namespace ropeserve {
namespace {

class CpuDecoderOps final : public DecoderOps {
 public:
  at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) const override {
    return cpu::RmsNorm(x, weight, eps);
  }
  at::Tensor AddRmsNorm(const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                        double eps) const override {
    return cpu::AddRmsNorm(x, residual, weight, eps);
  }
  at::Tensor SiluAndMul(const at::Tensor& gate_up) const override { return cpu::SiluAndMul(gate_up); }
  void ApplyRope(at::Tensor& q, at::Tensor& k, const RopeTable& rope) const override {
    cpu::ApplyRopeInplace(q, k, rope.cos, rope.sin);
  }
  void WriteKvCache(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
                    const PagedBatch& batch) const override {
    cpu::WriteKvCache(k, v, k_cache, v_cache, batch.slot_mapping);
  }
  at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const PagedBatch& batch, double scale) const override {
    return cpu::PagedAttention(q, k_cache, v_cache, batch.block_table_tensor, batch.query_start,
                               batch.context_len_tensor, scale);
  }
};

}  // namespace

std::unique_ptr<DecoderOps> MakeCpuDecoderOps() { return std::make_unique<CpuDecoderOps>(); }

}  // namespace ropeserve
