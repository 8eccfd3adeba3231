// The wall clock as Unix seconds: the `created` fields of API objects and
// the stores' timestamps (which tests replace through the stores' own
// `clock` options). One definition of the expression.
#pragma once

#include <chrono>
#include <cstdint>

namespace ropeserve {

inline std::int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace ropeserve
