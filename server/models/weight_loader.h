// Turns validated checkpoint tensors into owned LibTorch tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include "server/checkpoint/checkpoint.h"

namespace ropeserve {

c10::ScalarType ToScalarType(DType dtype);

// Copies tensor `name` out of the memory mapping (so the mapping may be
// closed afterwards) and converts it to `dtype`. The name must have passed
// Checkpoint::Open's validation; an absent name is an internal error.
at::Tensor LoadTensor(const Checkpoint& ckpt, const std::string& name, c10::ScalarType dtype);

}  // namespace ropeserve
