// Device kernels per decode step, from LibTorch's Kineto profiler (CUPTI on
// CUDA builds): what `bench --profile-steps N` prints, so a GPU run says
// where a step's time goes before anyone optimizes it (issue 57). The GPU
// machine has no Nsight Systems; this works wherever PyTorch's profiler does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "server/common/status.h"

namespace ropeserve::bench {

// One kernel name's (or copy's) device time over a profiled run.
struct KernelTotal {
  std::string name;
  std::int64_t calls = 0;
  double ms = 0;
};

// Runs `body` under the profiler and returns the device activities it
// recorded (kernels, copies, memsets), summed by name, most time first.
// An error when this LibTorch cannot profile the device (built without
// Kineto) or `body` fails.
StatusOr<std::vector<KernelTotal>> ProfileDeviceKernels(const std::function<Status()>& body);

// `longer` minus `shorter`, by name: the activities of the extra decode
// steps when both runs share their prompt and prefill. Names whose count
// does not grow are dropped.
std::vector<KernelTotal> KernelDifference(const std::vector<KernelTotal>& longer,
                                          const std::vector<KernelTotal>& shorter);

}  // namespace ropeserve::bench
