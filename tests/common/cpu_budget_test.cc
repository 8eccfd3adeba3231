// The CPUs this process may use: cgroup v2 and v1 quotas, at any level of
// the hierarchy, in a fake cgroup tree; the affinity mask of this process.
#include "server/common/cpu_budget.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/common/scratch_dir.h"

namespace ropeserve {
namespace {

namespace fs = std::filesystem;

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(CpuBudget, CgroupV2QuotaOfTheCgroupOrAnAncestor) {
  testing::ScratchDir d;
  const std::string cg = d.path() + "/cgroup", root = d.path() + "/v2";
  Write(cg, "0::/kubepods/pod1/ctr\n");
  Write(root + "/kubepods/pod1/ctr/cpu.max", "max 100000\n");
  EXPECT_FALSE(CgroupCpuLimit(cg, root, d.path() + "/none").has_value());
  Write(root + "/kubepods/pod1/cpu.max", "150000 100000\n");  // the pod's limit: 1.5 CPUs
  EXPECT_DOUBLE_EQ(*CgroupCpuLimit(cg, root, d.path() + "/none"), 1.5);
  Write(root + "/kubepods/pod1/ctr/cpu.max", "50000 100000\n");  // a smaller one below it wins
  EXPECT_DOUBLE_EQ(*CgroupCpuLimit(cg, root, d.path() + "/none"), 0.5);
  // Inside a container the process's cgroup is the mount's root.
  Write(cg, "0::/\n");
  Write(root + "/cpu.max", "400000 100000\n");
  EXPECT_DOUBLE_EQ(*CgroupCpuLimit(cg, root, d.path() + "/none"), 4.0);
  Write(root + "/cpu.max", "garbage\n");
  EXPECT_FALSE(CgroupCpuLimit(cg, root, d.path() + "/none").has_value());
  for (const char* bad : {"inf 100000\n", "nan 100000\n", "1e400 100000\n", "100000 1e-400\n", "-5 100000\n"}) {
    Write(root + "/cpu.max", bad);
    EXPECT_FALSE(CgroupCpuLimit(cg, root, d.path() + "/none").has_value()) << bad;
  }
}

TEST(CpuBudget, CgroupV1CfsQuota) {
  testing::ScratchDir d;
  const std::string cg = d.path() + "/cgroup", v1 = d.path() + "/v1";
  Write(cg, "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n");
  Write(v1 + "/docker/abc/cpu.cfs_quota_us", "-1\n");
  Write(v1 + "/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_FALSE(CgroupCpuLimit(cg, d.path() + "/none", v1).has_value());
  Write(v1 + "/docker/abc/cpu.cfs_quota_us", "200000\n");
  EXPECT_DOUBLE_EQ(*CgroupCpuLimit(cg, d.path() + "/none", v1), 2.0);
  EXPECT_FALSE(CgroupCpuLimit(d.path() + "/missing", d.path() + "/none", v1).has_value());
}

TEST(CpuBudget, ThisProcessUsesWhatItsAffinityAllows) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const CpuBudget b = ReadCpuBudget();
  EXPECT_EQ(b.affinity, CPU_COUNT(&set));
  EXPECT_GE(b.cpus, 1);
  EXPECT_LE(b.cpus, b.affinity);
  if (b.quota) {
    EXPECT_GE(b.cpus, static_cast<int>(*b.quota));
  }
  EXPECT_NE(b.Describe().find("affinity"), std::string::npos);
  // A narrower mask (as taskset -c 0 gives) is seen at once.
  if (CPU_COUNT(&set) > 1) {
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) {
        CPU_SET(c, &one);
        break;
      }
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    EXPECT_EQ(ReadCpuBudget().cpus, 1);
    ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
  }
}

}  // namespace
}  // namespace ropeserve
