// Bounds for comparing two floating-point computations of the same function
// that differ only in how their roundings are ordered or grouped: fused vs
// unfused kernels, GEMMs of different shapes, one thread vs two. They hold
// on every machine because they follow from the arithmetic, not from what
// one machine happened to produce.
//
// A sum of k products computed in any order is within gamma_k * sum|a_i b_i|
// of the exact value, gamma_k = k u / (1 - k u), u the unit roundoff (Higham,
// Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1), so
// two such computations differ by at most 2 gamma_k sum|a_i b_i|. For the
// random test models sum|a_i b_i| is within a small factor of the output's
// own scale. A network stacks `layers` rounds of reductions of length at
// most k; the error a layer receives is carried on with a gain (norms
// rescale, softmax and residual adds mix) that `gain` bounds. Bugs (a wrong
// op, layout or constant) show as differences of the values' own size,
// orders of magnitude above these bounds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace ropeserve::testing {

constexpr double kF32Roundoff = 0x1p-24;  // float32: 24-bit significand
constexpr double kBF16Roundoff = 0x1p-8;  // bfloat16: 8-bit significand

// gamma_k of Higham's analysis.
inline double Gamma(std::int64_t k, double u) {
  const double ku = static_cast<double>(k) * u;
  return ku < 1 ? ku / (1 - ku) : std::numeric_limits<double>::infinity();
}

// Largest expected |a - b| between two roundings of a `layers`-deep network
// whose longest reduction has length `k`, on values of magnitude `scale`.
inline double RoundingBound(std::int64_t k, std::int64_t layers, double scale, double u = kF32Roundoff,
                            double gain = 4) {
  return 2 * Gamma(k, u) * static_cast<double>(std::max<std::int64_t>(layers, 1)) * gain * scale;
}

}  // namespace ropeserve::testing
