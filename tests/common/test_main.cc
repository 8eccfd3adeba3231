// main() of the test binaries that compute with LibTorch: ROPESERVE_THREADS
// sets the intra-op thread count as it does for `ropeserve` (scripts/test
// runs the suite with 1; the suite must also pass with 2), then GoogleTest.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "server/serving/threads.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const char* t = std::getenv("ROPESERVE_THREADS"); t != nullptr && *t != '\0') {
    ropeserve::SetComputeThreads(std::stoi(t));
  }
  return RUN_ALL_TESTS();
}
