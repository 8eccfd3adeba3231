// The decoder's weights read from a checkpoint, in two parts:
//  - WeightPolicy, what a projection becomes on the worker's device (the
//    per-device decisions, in one place): the CPU's packed GEMM panels
//    (bfloat16 or float32), int8 per output channel (CPU only), group-wise
//    int4 (quantized at load, or a 4-bit checkpoint's own), or the compute
//    dtype as read (CUDA's 16-bit weights); and where the LM head goes.
//  - LoadDecoderWeights, the name mapping: Hugging Face's module names
//    (model.layers.N.self_attn.q_proj, ...) -> DecoderWeights, each
//    projection made by the policy.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "server/checkpoint/checkpoint.h"
#include "server/common/status.h"
#include "server/models/decoder.h"
#include "server/models/quantization.h"

namespace ropeserve {

struct WeightPolicy {
  // `quantization` as resolved (a 4-bit checkpoint's int4 included); `device`
  // and `dtype` already checked as a worker's (DecoderModel::LoadAny).
  WeightPolicy(DType dtype, Quantization quantization, at::Device device);

  at::Device device;
  c10::ScalarType dtype;   // the compute dtype
  bool int8 = false;       // projections quantized to int8
  bool int4 = false;       // projections at 4 bits (int4 or int4-all)
  bool int4_head = false;  // the LM head at 4 bits too (int4-all)
  bool pack = false;       // unquantized CPU projections in packed panels
  bool int8_head = false;  // the LM head at 8 bits: int8, or int4 on the CPU
  bool quantized_head = false;
  // CUDA: 4-bit projections also in the tensor-core kernel's layout
  // (Int4MmaLayout), which the op set then runs for 1-64 rows. Chosen by
  // ROPESERVE_CUDA_INT4_KERNEL=mma (default gemv: the matrix-vector kernel
  // to 16 rows, dequantization past) until a GPU run measures it
  // (docs/gpu.md); it keeps both layouts (the dequantized path past 64
  // rows reads the first), 0.5 more bytes a weight.
  bool int4_mma = false;

  // A tied LM head holds the embedding (DecoderModel::Embed reads its rows
  // back): one copy of the largest matrix, when the head is quantized or
  // packed and the model generates.
  bool EmbeddingInLmHead(const ModelConfig& c) const;
};

// ROPESERVE_CUDA_INT4_KERNEL (unset or gemv: false; mma: true; anything
// else an InvalidArgument naming it): WeightPolicy::int4_mma for a CUDA
// worker.
StatusOr<bool> CudaInt4MmaFromEnvironment();

// Every weight of `ckpt` (opened from `dir`, whose name error messages
// carry) the model's heads use, on the policy's device. A classifier made
// from a causal LM's rows (classifier_from_token) reads dir's tokenizer.
StatusOr<DecoderWeights> LoadDecoderWeights(const Checkpoint& ckpt, const std::string& dir, const WeightPolicy& policy);

}  // namespace ropeserve
