// DecoderOps on the CPU kernels (kernels/cpu): float32 and bfloat16.
#include <ATen/ATen.h>

#include "kernels/cpu/fused_ops.h"
#include "kernels/cpu/int4_linear.h"
#include "kernels/cpu/int8_linear.h"
#include "kernels/cpu/paged_attention.h"
#include "server/models/decoder_ops.h"

namespace ropeserve {
namespace {

class CpuDecoderOps final : public DecoderOps {
 public:
  at::Tensor Linear(const at::Tensor& x, const LinearWeight& w) const override {
    if (w.int8()) return cpu::Int8Linear(x, cpu::Int8Weight{w.weight, w.scale}, w.bias);
    if (w.is_int4()) return cpu::Int4Linear(x, w.int4, w.bias);
    if (w.packed.defined()) return cpu::PackedLinear(x, w.packed, w.bias);
    return w.bias.defined() ? at::linear(x, w.weight, w.bias) : at::linear(x, w.weight);
  }
  at::Tensor Embed(const at::Tensor& table, const LinearWeight& lm_head, const at::Tensor& ids,
                   at::ScalarType dtype) const override {
    if (table.defined()) return at::embedding(table, ids);
    if (lm_head.packed.defined()) return cpu::PackedRows(lm_head.packed, ids);
    if (lm_head.is_int4()) return Int4Rows(lm_head.int4, ids, dtype);
    return cpu::Int8Rows(cpu::Int8Weight{lm_head.weight, lm_head.scale}, ids, dtype);
  }
  at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) const override {
    return cpu::RmsNorm(x, weight, eps);
  }
  at::Tensor AddRmsNorm(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps) const override {
    return cpu::AddRmsNorm(x, residual, weight, eps);
  }
  at::Tensor SiluAndMul(const at::Tensor& gate_up) const override { return cpu::SiluAndMul(gate_up); }
  at::Tensor ToFloat(const at::Tensor& x) const override { return cpu::ToFloat32(x); }
  void ApplyRope(at::Tensor& q, at::Tensor& k, const RopeTable& rope) const override {
    q = q.contiguous();  // the kernel's layout (q, k may be views of the qkv projection)
    k = k.contiguous();
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
