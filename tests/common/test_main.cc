// main() of the test binaries that compute with LibTorch: ROPESERVE_THREADS
// sets the intra-op thread count as it does for `ropeserve` (scripts/test
// runs the suite with 1; the suite must also pass with 2), then GoogleTest.
// `--kernel-isa=NAME` (ctest's per-ISA runs of model_tests) runs the CPU
// kernels' variants of that ISA, or skips (exit 77) when this CPU cannot
// run it or it is the one the plain run already uses.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "server/serving/threads.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--kernel-isa=", 0) != 0) continue;
    const std::string name = arg.substr(13);
    const auto isa = ropeserve::cpu::ParseIsa(name);
    if (!isa) {
      std::fprintf(stderr, "unknown ISA %s\n", name.c_str());
      return 2;
    }
    if (!ropeserve::cpu::CpuCanRun(*isa)) {
      std::printf("skipped: this CPU (%s) cannot run %s kernels\n", ropeserve::cpu::CpuModelName().c_str(),
                  name.c_str());
      return 77;
    }
    if (*isa == ropeserve::cpu::BestIsa()) {
      std::printf("skipped: %s is this CPU's best ISA, which the plain run uses\n", name.c_str());
      return 77;
    }
    setenv("ROPESERVE_KERNEL_ISA", name.c_str(), 1);
    std::printf("CPU kernels: %s variants\n", name.c_str());
  }
  if (const char* t = std::getenv("ROPESERVE_THREADS"); t != nullptr && *t != '\0') {
    ropeserve::SetComputeThreads(std::stoi(t));
  }
  return RUN_ALL_TESTS();
}
