// SummarizeRows's row (kernels/cpu/logits_summary.h) in scalar C++: the
// reference the vector variants are tested against (std::exp in float32,
// summed in float64). No LibTorch header, no ISA flags.
#include <cmath>
#include <cstdint>
#include <limits>

namespace ropeserve::cpu::generic {

void SummarizeRow(const float* x, std::int64_t n, float* lse, float* max, std::int64_t* argmax) {
  float m = -std::numeric_limits<float>::infinity();
  std::int64_t at = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) {  // LibTorch's max: NaN and its first position
      *max = *lse = std::numeric_limits<float>::quiet_NaN();
      *argmax = i;
      return;
    }
    if (x[i] > m) {
      m = x[i];
      at = i;
    }
  }
  *max = m;
  *argmax = at;
  if (std::isinf(m)) {  // +inf: the sum is inf; -inf: every entry is -inf
    *lse = m;
    return;
  }
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i)
    if (x[i] != -std::numeric_limits<float>::infinity()) sum += std::exp(x[i] - m);
  *lse = static_cast<float>(static_cast<double>(m) + std::log(sum));
}

}  // namespace ropeserve::cpu::generic
