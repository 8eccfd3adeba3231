// The kernels a decoder forward calls besides its matrix products, one set
// per device, chosen once at load from where the weights live: the CPU set
// (kernels/cpu) and, in builds whose LibTorch has CUDA, the CUDA set
// (kernels/cuda; server/models/cuda_decoder_ops.cc). The decoder's layer
// code is the same for both.
// Thread-safety: const methods, no state.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

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

class DecoderOps {
 public:
  virtual ~DecoderOps() = default;
  // Hugging Face's RMSNorm over the last dimension of x (any contiguous
  // [..., hidden]); a new tensor.
  virtual at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) const = 0;
  // residual += x (rounded to the dtype); returns RmsNorm(residual). x, residual [rows, hidden], contiguous.
  virtual at::Tensor AddRmsNorm(const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight,
                                double eps) const = 0;
  // silu(gate_up[:, :I]) * gate_up[:, I:] for gate_up [T, 2 I] -> [T, I].
  virtual at::Tensor SiluAndMul(const at::Tensor& gate_up) const = 0;
  // The table ApplyRope takes, from cos/sin [T, rotary_dim] (RotaryTable's
  // layout); the CPU kernels read cos/sin as they are.
  virtual RopeTable PrepareRope(const at::Tensor& cos, const at::Tensor& sin) const { return {cos, sin, {}, {}}; }
  // Rotate-half RoPE in place on contiguous q [T, Hq, D] and k [T, Hkv, D]:
  // row t by the table's row t.
  virtual void ApplyRope(at::Tensor& q, at::Tensor& k, const RopeTable& rope) const = 0;
  // k, v [T, Hkv, D] into their cache slots (batch.slot_mapping).
  virtual void WriteKvCache(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
                            const PagedBatch& batch) const = 0;
  // q [T, Hq, D] over the paged cache, each sequence causal within its
  // chunk after its cached prefix -> [T, Hq, D].
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
#endif

}  // namespace ropeserve
