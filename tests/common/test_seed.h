// The seed of tests that draw fresh random inputs every run: the
// environment's ROPESERVE_TEST_SEED when set (to replay a failure), else
// the clock. Printed once, so that every failure can be replayed. Tests
// with fixed seeds (most CPU kernel tests) need none of this.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ropeserve::testing {

inline std::uint64_t TestSeed() {
  static const std::uint64_t seed = [] {
    std::uint64_t s = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    const char* env = std::getenv("ROPESERVE_TEST_SEED");
    if (env != nullptr && *env != '\0') s = std::stoull(env);
    std::printf("test seed %llu (set ROPESERVE_TEST_SEED=%llu to replay)\n", static_cast<unsigned long long>(s),
                static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

}  // namespace ropeserve::testing
