// `make-model --int4-format`: a projection's float weights written as a
// GPTQ, AWQ or compressed-tensors checkpoint stores them
// (server/checkpoint/int4_checkpoint.h), so that the loader is tested on
// files laid out as the hub's. Torch-free, written by hand: no Debian
// package writes these formats.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/checkpoint/int4_checkpoint.h"
#include "server/checkpoint/safetensors.h"

namespace ropeserve {

// The group of each of k columns: k / group, or with act-order a random
// permutation of that (seeded) as GPTQ's desc_act leaves it.
std::vector<std::int32_t> Int4GroupIndex(const Int4Checkpoint& q, std::int64_t k, std::uint64_t seed);

// w [n, k] row-major, quantized round-to-nearest per (row, group):
// asymmetric over a range that includes 0 (scale = range / 15; GPTQ v1's
// zero points at least 1, since it stores them minus one) or symmetric
// (scale = max|w| / 7, zero 8), the scale rounded first to its stored type
// (GPTQ and AWQ: float16; compressed-tensors: `scale_dtype`), then packed
// into the format's tensors named after `module`.
std::vector<TensorToWrite> WriteInt4Projection(const Int4Checkpoint& q, const std::string& module,
                                               const std::vector<float>& w, std::int64_t n, std::int64_t k,
                                               const std::vector<std::int32_t>& g_idx, DType scale_dtype);

}  // namespace ropeserve
