// The int8 and int4 kernels' dispatch on the number of x rows in a pass
// (1-8): `f` is called with std::integral_constant<int, R>, so that each
// row count gets its own unrolled instance. Header-only, no LibTorch (the
// AVX-512 files include it).
#pragma once

#include <cstdint>
#include <type_traits>

namespace ropeserve::cpu {

template <typename F>
inline void DispatchRows(std::int64_t rows, F&& f) {
  switch (rows) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 5:
      return f(std::integral_constant<int, 5>{});
    case 6:
      return f(std::integral_constant<int, 6>{});
    case 7:
      return f(std::integral_constant<int, 7>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

}  // namespace ropeserve::cpu
