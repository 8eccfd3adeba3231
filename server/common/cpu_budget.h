// How many CPUs this process may actually use: its affinity mask
// (sched_getaffinity: taskset, cpusets, Kubernetes' static CPU manager)
// and its cgroup's CPU quota (cgroup v2 cpu.max, v1 cpu.cfs_quota_us /
// cpu.cfs_period_us: a Kubernetes CPU limit, docker --cpus), not the
// machine's core count: the default number of compute threads. A server on
// a shared node that starts one thread per machine core competes with
// itself once the quota or its neighbours take cores away.
//
// Torch-free; the cgroup reading takes its root directories as arguments
// so that tests can give it a fake hierarchy.
#pragma once

#include <optional>
#include <string>

namespace ropeserve {

struct CpuBudget {
  int cpus = 1;                  // what to use: min(affinity, ceil(quota)), at least 1
  int affinity = 1;              // CPUs in the affinity mask
  std::optional<double> quota;   // CPUs the cgroup quota allows, when one is set
  std::string Describe() const;  // "2 (affinity 2, cgroup quota 1.5 CPUs)"
};

// The CPU limit of the cgroup `/proc/self/cgroup` places this process in
// (cgroup_file), under the v2 mount `v2_root` or the v1 cpu controller's
// mount `v1_root`, or of any cgroup above it (the smallest); nullopt when
// none is set or none can be read.
std::optional<double> CgroupCpuLimit(const std::string& cgroup_file = "/proc/self/cgroup",
                                     const std::string& v2_root = "/sys/fs/cgroup",
                                     const std::string& v1_root = "/sys/fs/cgroup/cpu");

// This process's budget, read now.
CpuBudget ReadCpuBudget();

}  // namespace ropeserve
