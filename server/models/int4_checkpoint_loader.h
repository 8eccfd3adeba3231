// GPTQ, AWQ and compressed-tensors 4-bit projections
// (server/checkpoint/int4_checkpoint.h states each layout) read into the
// int4 weight format (kernels/int4_weight.h). Their values are kept
// exactly: levels, zero points and scales as stored, so the model computes
// with the checkpoint's dequantized weights; act-order checkpoints keep
// their column order as a permutation the kernel applies to x.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "kernels/int4_weight.h"
#include "server/checkpoint/checkpoint.h"

namespace ropeserve {

// One projection's weights in one form, whatever the layout:
// W[n, k] = (q[n, k] - zero[n, g]) * scale[n, g] with g = g_idx[k].
struct Int4Levels {
  at::Tensor q;      // [N, K] uint8 in [0, 15], the checkpoint's column order
  at::Tensor scale;  // [N, Gn] float32
  at::Tensor zero;   // [N, Gn] uint8 in [0, 16]
  at::Tensor g_idx;  // [K] int64 in [0, Gn)
};

// Reads projection `module` (its tensors validated by Checkpoint::Open).
// Errors (InvalidArgument, naming the tensor): a non-finite scale, a g_idx
// out of range or not giving every group the same number of columns, a
// compressed-tensors weight_shape that disagrees with the packed tensor,
// an unpacked zero point outside the 4-bit range.
StatusOr<Int4Levels> ReadInt4Levels(const Checkpoint& ckpt, const Int4Checkpoint& format, const std::string& module);

// Projections that read one input (q/k/v, gate/up) stacked along their
// outputs and packed for the kernel: columns sorted into whole groups
// (the permutation kept when it is not the identity), groups larger than
// 128 columns split into runs of 128, 64 or 32 with the same scale and
// zero (exact). InvalidArgument when the parts order their columns
// differently (different g_idx: they could not share one x).
StatusOr<Int4Weight> PackInt4Levels(const std::vector<Int4Levels>& parts, const std::string& what);

}  // namespace ropeserve
