// Checkpoints whose decoder projections are stored as 4-bit integers, in
// the three layouts the Hugging Face hub ships (config.json's
// `quantization_config`), parsed and validated torch-free. The loader
// (server/models/int4_checkpoint_loader.h) unpacks them into the int4
// weight format (kernels/int4_weight.h); `make-model` writes them.
//
// Per projection of float shape [N, K] (N outputs, K inputs), groups of G
// input columns (G = K for one group per row), Gn = K / G, every 4-bit
// value v in bits 4i..4i+3 of an int32 (i = 0 the lowest):
//   GPTQ ("gptq"; AutoGPTQ / GPTQModel / optimum):
//     qweight [K / 8, N] int32: value i of qweight[r, n] is column k = 8r + i;
//     qzeros [Gn, N / 8] int32: value i of qzeros[g, c] is output n = 8c + i;
//     scales [Gn, N] float16; g_idx [K] int32, the group of each column
//     (k / G unless desc_act reordered them);
//     W[n, k] = (q - z) * s at group g_idx[k], where z is the stored zero
//     plus one in checkpoint_format "gptq" (v1) and as stored in "gptq_v2".
//   AWQ ("awq", version "gemm"; AutoAWQ):
//     qweight [K, N / 8] int32, qzeros [Gn, N / 8] int32, packed along the
//     outputs in the order 0 2 4 6 1 3 5 7: value i of word c is output
//     n = 8c + order[i]; scales [Gn, N] float16; W = (q - z) * s.
//   compressed-tensors ("pack-quantized", int 4-bit weights; llm-compressor):
//     weight_packed [N, ceil(K / 8)] int32 (value i of word c is column
//     8c + i), values stored as signed + 8; weight_scale [N, Gn];
//     asymmetric: weight_zero_point [ceil(N / 8), Gn] int32 packed along
//     the outputs, also signed + 8; weight_g_idx [K] with act-order;
//     weight_shape [2] = [N, K]; W = (q - z) * s with q, z signed.
// Each reads as levels q, z in [0, 15] (GPTQ v1's z in [1, 16]) with one
// float scale per (row, group): exactly what the int4 kernel computes.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/checkpoint/tensor_spec.h"
#include "server/common/status.h"

namespace ropeserve {

enum class Int4Format { kGptq, kAwq, kCompressedTensors };
const char* Int4FormatName(Int4Format format);  // "gptq", "awq", "compressed-tensors"

struct Int4Checkpoint {
  Int4Format format = Int4Format::kGptq;
  std::int64_t group_size = 128;  // columns per scale; -1: one group per row
  // No zero points stored (compressed-tensors' symmetric weights); GPTQ
  // stores them either way, AWQ always.
  bool symmetric = true;
  bool act_order = false;        // g_idx orders columns into groups (GPTQ desc_act, compressed-tensors actorder)
  bool zeros_minus_one = false;  // GPTQ checkpoint_format "gptq" (v1)
  // compressed-tensors' `ignore` / AWQ's `modules_to_not_convert`: modules
  // left in floating point. None may be a decoder projection (checked).
  std::vector<std::string> not_converted;

  // The group size of a projection with K inputs.
  std::int64_t Group(std::int64_t k) const { return group_size < 0 ? k : group_size; }
};

// config.json's `quantization_config` (`source` names it in errors).
// Unsupported variants are refused with an error naming the field: other
// bit widths, formats and packings, activation quantization, a quantized
// LM head, modules not converted among the decoder projections.
StatusOr<Int4Checkpoint> ParseInt4Checkpoint(const nlohmann::json& config, const std::string& source);

// Whether `module` (e.g. "model.layers.0.mlp.down_proj") is left in
// floating point by the checkpoint's ignore list.
bool Int4ModuleNotConverted(const Int4Checkpoint& q, const std::string& module);

// The shape rules a projection [N, K] must meet (K a multiple of 8 and of
// the group size, the group size a multiple of 32 for the kernel, N a
// multiple of 8 where zero points are packed along the outputs).
Status CheckInt4Projection(const Int4Checkpoint& q, const std::string& module, std::int64_t n, std::int64_t k);

// The tensors projection `module` ([N, K] in floating point) holds.
std::vector<TensorSpec> Int4TensorSpecs(const Int4Checkpoint& q, const std::string& module, std::int64_t n,
                                        std::int64_t k);

// The `quantization_config` object `make-model` writes for `q` (as the
// exporters write it).
std::string Int4QuantizationConfigJson(const Int4Checkpoint& q);

}  // namespace ropeserve
