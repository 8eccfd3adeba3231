// bench/kernel_profile.h: what `bench --profile-steps` reports. The
// difference by kernel name runs everywhere; the profiler's device records
// need a CUDA device (gpu-check's (a3) runs the whole model_tests there).
#include "bench/kernel_profile.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "server/models/device.h"

namespace ropeserve::bench {
namespace {

TEST(KernelProfile, TheDifferenceIsTheLongerRunsExtraCallsByNameMostTimeFirst) {
  const std::vector<KernelTotal> longer = {
      {"gemv", 10, 5.0}, {"rmsnorm", 21, 1.0}, {"prefill_attention", 1, 2.0}, {"decode_attention", 8, 3.0}};
  const std::vector<KernelTotal> shorter = {{"gemv", 2, 1.0}, {"rmsnorm", 5, 0.25}, {"prefill_attention", 1, 2.0}};
  const std::vector<KernelTotal> d = KernelDifference(longer, shorter);
  ASSERT_EQ(d.size(), 3u);  // prefill_attention's count did not grow: not a decode step's
  EXPECT_EQ(d[0].name, "gemv");
  EXPECT_EQ(d[0].calls, 8);
  EXPECT_DOUBLE_EQ(d[0].ms, 4.0);
  EXPECT_EQ(d[1].name, "decode_attention");  // only in the longer run: all of it
  EXPECT_EQ(d[1].calls, 8);
  EXPECT_EQ(d[2].name, "rmsnorm");
  EXPECT_EQ(d[2].calls, 16);
  EXPECT_DOUBLE_EQ(d[2].ms, 0.75);
}

TEST(KernelProfile, ABodysErrorIsReturnedAndTheProfilerStopped) {
  const auto failed = ProfileDeviceKernels([] { return InvalidArgument("the body failed"); });
  ASSERT_FALSE(failed.ok());
  // Either this LibTorch has no device profiler, or the body's own error.
  if (failed.status().code() != ErrorCode::kFailedPrecondition) {
    EXPECT_EQ(failed.status().message(), "the body failed");
    // Stopped: a second profile starts.
    EXPECT_TRUE(ProfileDeviceKernels([] { return Status::Ok(); }).ok());
  }
}

TEST(KernelProfile, CudaKernelsAreRecordedByName) {
  const at::Device cuda("cuda");
  if (!CheckDeviceUsable(cuda).ok()) GTEST_SKIP() << "no CUDA GPU visible";
  const at::Tensor a = at::randn({256, 256}, at::TensorOptions().device(cuda));
  const auto profiled = ProfileDeviceKernels([&] {
    float sum = 0;
    for (int i = 0; i < 3; ++i) sum += at::mm(a, a).sum().item<float>();  // item(): waits for the device
    return std::isfinite(sum) ? Status::Ok() : Internal("a product of random numbers was not finite");
  });
  ASSERT_TRUE(profiled.ok()) << profiled.status().message();
  std::int64_t calls = 0;
  for (const KernelTotal& k : *profiled) calls += k.calls;
  EXPECT_GE(calls, 3) << "three matrix products, at least one kernel each";
}

}  // namespace
}  // namespace ropeserve::bench
