// The kernels a decoder forward calls, its matrix products included, one
// set per device, chosen once at load from where the weights live: the CPU set
// (kernels/cpu) and, in builds whose LibTorch has CUDA, the CUDA set
// (kernels/cuda; server/models/cuda_decoder_ops.cc). The decoder's layer
// code is the same for both.
// Thread-safety: const methods, no state.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "kernels/cpu/packed_linear.h"
#include "kernels/int4_weight.h"
#include "server/models/paged_model.h"

namespace ropeserve {

// A forward's RoPE rotation, prepared once (DecoderOps::PrepareRope) and
// applied in every layer.
struct RopeTable {
  at::Tensor cos, sin;  // [T, rotary_dim], RotaryTable's layout: row t rotates row t
  // The device kernel's own form when it needs one (CUDA: float32 [T, 2F]
  // of cos then sin for the F angles, and the row indices 0..T-1), built
  // once per forward instead of in each layer; else undefined.
  at::Tensor packed, rows;
};

// One projection y = x W^T + b.
struct LinearWeight {
  at::Tensor weight;  // [N, K]: the compute dtype, or int8 (Quantization::kInt8); undefined when packed
  at::Tensor scale;   // [N] float32 per output channel for int8 weights; else undefined
  at::Tensor bias;    // [N] (compute dtype; float32 with int8 weights) or undefined
  // bfloat16 or float32 weights on the CPU: the packed GEMM's panel order
  // (kernels/cpu/packed_linear.h), replacing `weight`.
  cpu::PackedWeight packed;
  // Quantization::kInt4: the group-wise 4-bit weights, replacing `weight`
  // (the bias then float32).
  Int4Weight int4;
  // The same 4-bit weights in the CUDA tensor-core kernel's order, where
  // the policy asks for it (WeightPolicy::int4_mma); else undefined.
  Int4MmaWeight int4_mma;
  bool int8() const { return scale.defined(); }
  bool is_int4() const { return int4.packed.defined(); }
};

class DecoderOps {
 public:
  virtual ~DecoderOps() = default;
  // y = x W^T + b for x [T, K] in the compute dtype (int8 weights: the CPU's
  // int8 kernels; packed bf16: the packed GEMM; else LibTorch's GEMM,
  // cuBLAS on CUDA).
  virtual at::Tensor Linear(const at::Tensor& x, const LinearWeight& w) const = 0;
  // Rows `ids` [T] of the embedding in `dtype`: of `table` [V, H], or, when
  // that is undefined, of a tied int8 or packed LM head (its rows read back).
  virtual at::Tensor Embed(const at::Tensor& table, const LinearWeight& lm_head, const at::Tensor& ids,
                           at::ScalarType dtype) const = 0;
  // Hugging Face's RMSNorm over the last dimension of x (any contiguous
  // [..., hidden]); a new tensor.
  virtual at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) const = 0;
  // residual += x (rounded to the dtype); returns RmsNorm(residual). x, residual [rows, hidden], contiguous.
  // x is consumed: the result may be x itself, normalized in place (CUDA).
  virtual at::Tensor AddRmsNorm(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps) const = 0;
  // silu(gate_up[:, :I]) * gate_up[:, I:] for gate_up [T, 2 I] -> [T, I].
  virtual at::Tensor SiluAndMul(const at::Tensor& gate_up) const = 0;
  // x as float32 (the logits the sampler reads).
  virtual at::Tensor ToFloat(const at::Tensor& x) const { return x.to(at::kFloat); }
  // The table ApplyRope takes, from cos/sin [T, rotary_dim] (RotaryTable's
  // layout); the CPU kernels read cos/sin as they are.
  virtual RopeTable PrepareRope(const at::Tensor& cos, const at::Tensor& sin) const { return {cos, sin, {}, {}}; }
  // Rotate-half RoPE on q [T, Hq, D] and k [T, Hkv, D], row t by the
  // table's row t: in place, or (CPU) on contiguous copies that replace q
  // and k. Their rows may be strided (views of the qkv projection), each
  // row's heads contiguous.
  virtual void ApplyRope(at::Tensor& q, at::Tensor& k, const RopeTable& rope) const = 0;
  // k, v [T, Hkv, D] into their cache slots (batch.slot_mapping); rows may
  // be strided as ApplyRope's.
  virtual void WriteKvCache(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
                            const PagedBatch& batch) const = 0;
  // ApplyRope, then k (rotated) and v into their cache slots: what a paged
  // forward does with a layer's q, k, v. The same bits as the two calls
  // (this default); CUDA does it in one kernel that leaves k unrotated in
  // its buffer (the cache holds the rotated keys; nothing reads k after).
  virtual void RopeAndWriteKvCache(at::Tensor& q, at::Tensor& k, const at::Tensor& v, const RopeTable& rope,
                                   at::Tensor& k_cache, at::Tensor& v_cache, const PagedBatch& batch) const {
    ApplyRope(q, k, rope);
    WriteKvCache(k, v, k_cache, v_cache, batch);
  }
  // The scratch PagedAttention needs for `batch`'s rows of q [T, Hq, D]
  // (PagedBatch::attention_workspace), made once per forward so that no
  // layer allocates; undefined where none is needed (the CPU).
  virtual at::Tensor AttentionWorkspace(const PagedBatch& batch, std::int64_t rows, std::int64_t heads,
                                        std::int64_t head_dim) const {
    return {};
  }
  // q [T, Hq, D] (rows may be strided as ApplyRope's: CUDA reads the view
  // in place) over the paged cache, each sequence causal within its chunk
  // after its cached prefix -> contiguous [T, Hq, D].
  virtual at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                    const PagedBatch& batch, double scale) const = 0;
};

std::unique_ptr<DecoderOps> MakeCpuDecoderOps();
#ifdef ROPESERVE_HAVE_CUDA
// float16 / bfloat16 tensors on one CUDA device, on its current stream.
std::unique_ptr<DecoderOps> MakeCudaDecoderOps();
// A CUDA device's free and total memory in bytes (cudaMemGetInfo; zeros
// when it cannot be read).
struct DeviceMemory {
  std::int64_t free = 0, total = 0;
};
DeviceMemory GetDeviceMemory(at::Device device);
// The bytes LibTorch's caching allocator holds in tensors on a CUDA device:
// now, and at their peak since ResetAllocatorPeak.
struct AllocatorBytes {
  std::int64_t current = 0, peak = 0;
};
AllocatorBytes GetAllocatorBytes(at::Device device);
void ResetAllocatorPeak(at::Device device);
#endif

}  // namespace ropeserve
