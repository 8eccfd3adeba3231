// A span head's output for one window. Torch-free.
#pragma once

#include <cstdint>
#include <vector>

namespace ropeserve {

struct SpanLogits {
  std::vector<float> start;
  std::vector<float> end;
  // The trunk's last hidden state, [len, hidden] row-major; filled only
  // when asked for (`ropeserve encode`).
  std::vector<float> hidden;
};

}  // namespace ropeserve
