// Whether a CUDA device can take a model: the one check behind every
// `--device cuda[:N]` (decoders, span models, bench), so that a machine
// without a GPU, or with fewer than N + 1, is refused at start-up with a
// clear error instead of LibTorch's exception at the first tensor moved.
#pragma once

#include <ATen/ATen.h>

#include "server/common/status.h"

namespace ropeserve {

// OK for the CPU. For a CUDA device: FailedPrecondition when the process
// sees no GPU (or the LibTorch has no CUDA), InvalidArgument when its index
// is past the last GPU. On success cuDNN is turned off in LibTorch's context:
// ropeserve's attention is its own kernels and its projections cuBLAS, and
// Debian ships no cuDNN (scripts/cudnn-stub stands in for it).
Status CheckDeviceUsable(const at::Device& device);

}  // namespace ropeserve
