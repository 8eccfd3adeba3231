// The black-box tests' fault hooks (ROPESERVE_INJECT_FAULTS,
// ROPESERVE_INJECT_BATCH_CRASH): environment variables `serve` reads only
// in a build with -DROPESERVE_TEST_HOOKS=ON (the default when the tests are
// built; the release images are built without them). Elsewhere a set hook
// is ignored with a warning, so a stray variable cannot make production
// fail its forwards or exit mid-batch.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdlib>

namespace ropeserve {

// The hook's value, or null. Static: its body depends on the including
// file's ROPESERVE_TEST_HOOKS (CMakeLists.txt sets it on the files that
// read hooks).
static inline const char* TestHook(const char* name) {
  const char* value = std::getenv(name);
#if defined(ROPESERVE_TEST_HOOKS) && ROPESERVE_TEST_HOOKS
  return value;
#else
  if (value != nullptr && *value != '\0')
    spdlog::warn("{} ignored: this build has no test hooks (configure with -DROPESERVE_TEST_HOOKS=ON)", name);
  return nullptr;
#endif
}

}  // namespace ropeserve
