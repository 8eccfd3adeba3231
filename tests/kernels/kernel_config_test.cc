// The CPU kernels' configuration read from the environment: one switch
// convention, bounded counts, errors that name the variable.
#include "kernels/cpu/kernel_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

namespace ropeserve::cpu {
namespace {

class KernelEnvironment : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
  }
  static constexpr const char* kVars[] = {"ROPESERVE_KERNEL_AVX512", "ROPESERVE_KERNEL_POOL_SPIN_US",
                                          "ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS", "ROPESERVE_KERNEL_AMX_MIN_ROWS"};
};

TEST_F(KernelEnvironment, DefaultsThenEachVariable) {
  for (const char* v : kVars) unsetenv(v);
  std::string error;
  auto c = KernelConfigFromEnvironment(error);
  ASSERT_TRUE(c) << error;
  EXPECT_TRUE(c->avx512);
  EXPECT_EQ(c->pool_spin_us, 200);
  EXPECT_EQ(c->int8_vnni_max_rows, 16);
  EXPECT_EQ(c->amx_min_rows, 32);
  for (const char* off : {"0", "off", "false"}) {
    setenv("ROPESERVE_KERNEL_AVX512", off, 1);
    c = KernelConfigFromEnvironment(error);
    ASSERT_TRUE(c) << error;
    EXPECT_FALSE(c->avx512) << off;
  }
  for (const char* on : {"1", "on", "true"}) {
    setenv("ROPESERVE_KERNEL_AVX512", on, 1);
    EXPECT_TRUE(KernelConfigFromEnvironment(error)->avx512) << on;
  }
  setenv("ROPESERVE_KERNEL_POOL_SPIN_US", "0", 1);
  setenv("ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS", "65536", 1);
  setenv("ROPESERVE_KERNEL_AMX_MIN_ROWS", "0", 1);
  c = KernelConfigFromEnvironment(error);
  ASSERT_TRUE(c) << error;
  EXPECT_EQ(c->pool_spin_us, 0);
  EXPECT_EQ(c->int8_vnni_max_rows, 65536);
  EXPECT_EQ(c->amx_min_rows, 0);
  const auto described = DescribeKernelConfig(*c);
  ASSERT_EQ(described.size(), 4u);
  EXPECT_EQ(described[3], (std::pair<std::string, std::string>("amx_min_rows", "0")));
  EXPECT_EQ(described[0], (std::pair<std::string, std::string>("avx512", "on")));
  EXPECT_EQ(described[1], (std::pair<std::string, std::string>("pool_spin_us", "0")));
}

TEST_F(KernelEnvironment, BadValuesAreErrorsNamingTheVariable) {
  const std::pair<const char*, const char*> bad[] = {
      {"ROPESERVE_KERNEL_AVX512", "yes"},          {"ROPESERVE_KERNEL_AVX512", ""},
      {"ROPESERVE_KERNEL_POOL_SPIN_US", "-1"},     {"ROPESERVE_KERNEL_POOL_SPIN_US", "1000001"},
      {"ROPESERVE_KERNEL_POOL_SPIN_US", "20us"},   {"ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS", "65537"},
      {"ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS", ""}, {"ROPESERVE_KERNEL_AMX_MIN_ROWS", "65537"},
      {"ROPESERVE_KERNEL_AMX_MIN_ROWS", "x"},
  };
  for (const auto& [name, value] : bad) {
    for (const char* v : kVars) unsetenv(v);
    setenv(name, value, 1);
    std::string error;
    EXPECT_FALSE(KernelConfigFromEnvironment(error)) << name << "=" << value;
    EXPECT_NE(error.find(name), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace ropeserve::cpu
