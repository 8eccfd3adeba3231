// The CPU kernels' configuration read from the environment: the ISA
// choice (auto, a name, the older AVX-512 switch; one this CPU cannot run
// is an error), one switch convention, bounded counts, errors that name
// the variable.
#include "kernels/cpu/kernel_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "kernels/cpu/kernel_table.h"

namespace ropeserve::cpu {
namespace {

class KernelEnvironment : public ::testing::Test {
 protected:
  void SetUp() override {
    // The process's own choice (ctest's per-ISA runs set it) comes back.
    if (const char* isa = getenv("ROPESERVE_KERNEL_ISA")) saved_isa_ = isa;
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
    if (!saved_isa_.empty()) setenv("ROPESERVE_KERNEL_ISA", saved_isa_.c_str(), 1);
  }
  static constexpr const char* kVars[] = {"ROPESERVE_KERNEL_ISA", "ROPESERVE_KERNEL_AVX512",
                                          "ROPESERVE_KERNEL_POOL_SPIN_US", "ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS",
                                          "ROPESERVE_KERNEL_AMX_MIN_ROWS"};
  std::string saved_isa_;
};

std::string Value(const KernelConfig& c, const std::string& name) {
  for (const auto& [n, v] : DescribeKernelConfig(c))
    if (n == name) return v;
  return "?";
}

TEST_F(KernelEnvironment, DefaultsThenEachVariable) {
  for (const char* v : kVars) unsetenv(v);
  std::string error;
  auto c = KernelConfigFromEnvironment(error);
  ASSERT_TRUE(c) << error;
  EXPECT_FALSE(c->isa.has_value());  // auto
  EXPECT_EQ(Value(*c, "isa"), IsaName(BestIsa()));
  EXPECT_EQ(Value(*c, "isa_requested"), "auto");
  EXPECT_EQ(c->pool_spin_us, 200);
  EXPECT_FALSE(c->int8_vnni_max_rows.has_value());  // auto: the ISA's crossover
  EXPECT_EQ(Value(*c, "int8_vnni_max_rows"), std::to_string(KernelsFor(BestIsa()).int8_kernel_max_rows));
  EXPECT_EQ(Value(*c, "int4_kernel_max_rows"), std::to_string(KernelsFor(BestIsa()).int4_kernel_max_rows));
  EXPECT_EQ(Value(*c, "int4_activations"), KernelsFor(BestIsa()).int4_int8_x ? "int8_per_group" : "int16_per_row");
  EXPECT_EQ(c->amx_min_rows, 32);
  // Every ISA this CPU runs can be chosen by name.
  for (Isa isa : RunnableIsas()) {
    setenv("ROPESERVE_KERNEL_ISA", IsaName(isa), 1);
    c = KernelConfigFromEnvironment(error);
    ASSERT_TRUE(c) << error;
    EXPECT_EQ(c->isa, isa);
    EXPECT_EQ(Value(*c, "isa"), IsaName(isa));
  }
  unsetenv("ROPESERVE_KERNEL_ISA");
  // The older switch: off caps the ISA at avx2 (or what the CPU has below it).
  for (const char* off : {"0", "off", "false"}) {
    setenv("ROPESERVE_KERNEL_AVX512", off, 1);
    c = KernelConfigFromEnvironment(error);
    ASSERT_TRUE(c) << error;
    ASSERT_TRUE(c->isa.has_value()) << off;
    EXPECT_LE(*c->isa, Isa::kAvx2) << off;
    EXPECT_EQ(*c->isa, CpuCanRun(Isa::kAvx2) ? Isa::kAvx2 : BestIsa());
  }
  for (const char* on : {"1", "on", "true"}) {
    setenv("ROPESERVE_KERNEL_AVX512", on, 1);
    EXPECT_FALSE(KernelConfigFromEnvironment(error)->isa.has_value()) << on;
  }
  setenv("ROPESERVE_KERNEL_ISA", "generic", 1);
  setenv("ROPESERVE_KERNEL_AVX512", "0", 1);  // below avx2 already: nothing to cap
  EXPECT_EQ(KernelConfigFromEnvironment(error)->isa, Isa::kGeneric);
  unsetenv("ROPESERVE_KERNEL_AVX512");
  setenv("ROPESERVE_KERNEL_POOL_SPIN_US", "0", 1);
  setenv("ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS", "65536", 1);
  setenv("ROPESERVE_KERNEL_AMX_MIN_ROWS", "0", 1);
  c = KernelConfigFromEnvironment(error);
  ASSERT_TRUE(c) << error;
  EXPECT_EQ(c->pool_spin_us, 0);
  EXPECT_EQ(c->int8_vnni_max_rows, 65536);
  EXPECT_EQ(c->amx_min_rows, 0);
  EXPECT_EQ(Value(*c, "isa_requested"), "generic");
  EXPECT_EQ(Value(*c, "amx_min_rows"), "0");
  EXPECT_EQ(Value(*c, "int8_vnni_max_rows"), "65536");
  setenv("ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS", "auto", 1);
  c = KernelConfigFromEnvironment(error);
  ASSERT_TRUE(c) << error;
  EXPECT_FALSE(c->int8_vnni_max_rows.has_value());
  // auto follows the ISA chosen: the generic table's crossover here.
  EXPECT_EQ(Value(*c, "int8_vnni_max_rows"), std::to_string(KernelsFor(Isa::kGeneric).int8_kernel_max_rows));
  EXPECT_EQ(Value(*c, "pool_spin_us"), "0");
  EXPECT_EQ(Value(*c, "cpu"), CpuModelName());
  EXPECT_NE(Value(*c, "cpu_extensions"), "?");
}

TEST_F(KernelEnvironment, BadValuesAreErrorsNamingTheVariable) {
  const std::pair<const char*, const char*> bad[] = {
      {"ROPESERVE_KERNEL_AVX512", "yes"},
      {"ROPESERVE_KERNEL_AVX512", ""},
      {"ROPESERVE_KERNEL_ISA", "sse2"},
      {"ROPESERVE_KERNEL_ISA", ""},
      {"ROPESERVE_KERNEL_POOL_SPIN_US", "-1"},
      {"ROPESERVE_KERNEL_POOL_SPIN_US", "1000001"},
      {"ROPESERVE_KERNEL_POOL_SPIN_US", "20us"},
      {"ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS", "65537"},
      {"ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS", ""},
      {"ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS", "-1"},
      {"ROPESERVE_KERNEL_INT8_VNNI_MAX_ROWS", "Auto"},
      {"ROPESERVE_KERNEL_AMX_MIN_ROWS", "65537"},
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

TEST_F(KernelEnvironment, AnIsaThisCpuCannotRunIsRefusedNamingWhatItRuns) {
  for (Isa isa : {Isa::kNeon, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    if (CpuCanRun(isa)) continue;
    for (const char* v : kVars) unsetenv(v);
    setenv("ROPESERVE_KERNEL_ISA", IsaName(isa), 1);
    std::string error;
    EXPECT_FALSE(KernelConfigFromEnvironment(error)) << IsaName(isa);
    EXPECT_NE(error.find("cannot run"), std::string::npos) << error;
    EXPECT_NE(error.find(IsaName(BestIsa())), std::string::npos) << error;
  }
  // The older switch off contradicts an explicit AVX-512 ISA.
  if (CpuCanRun(Isa::kAvx512)) {
    KernelConfig c;
    ASSERT_EQ(SetKernelIsa(c, "avx512"), "");
    EXPECT_NE(ApplyAvx512Switch(c, false), "");
  }
  KernelConfig c;
  EXPECT_NE(SetKernelIsa(c, "AVX2"), "");  // names are lower case
  EXPECT_EQ(SetKernelIsa(c, "auto"), "");
  EXPECT_FALSE(c.isa.has_value());
}

}  // namespace
}  // namespace ropeserve::cpu
