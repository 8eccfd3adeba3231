// One tensor a checkpoint must (or may) hold: what Checkpoint::Open
// validates and `make-model` writes. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/checkpoint/dtype.h"

namespace ropeserve {

struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  // The element types allowed; empty: any floating type (F32, F16, BF16).
  std::vector<DType> dtypes = {};
  // Absent is fine (e.g. GPTQ's g_idx without act-order).
  bool optional = false;
};

}  // namespace ropeserve
