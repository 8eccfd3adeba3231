// Small at::vec helpers shared by the CPU kernels.
#pragma once

#include <ATen/cpu/vec/vec.h>

#include <cstdint>

namespace ropeserve::cpu {

using Vec = at::vec::Vectorized<float>;

// Sum of a vector's lanes.
inline float HorizontalSum(const Vec& v) {
  float buf[Vec::size()];
  v.store(buf);
  float s = 0;
  for (int k = 0; k < Vec::size(); ++k) s += buf[k];
  return s;
}

// sum(a[i] * b[i]) over n floats, vectorised with a scalar tail.
inline float Dot(const float* a, const float* b, std::int64_t n) {
  Vec acc(0.0f);
  std::int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) acc = at::vec::fmadd(Vec::loadu(a + i), Vec::loadu(b + i), acc);
  float s = HorizontalSum(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace ropeserve::cpu
