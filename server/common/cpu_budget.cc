#include "server/common/cpu_budget.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

namespace ropeserve {

namespace {

std::optional<std::string> ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

// cgroup v2's cpu.max: "max 100000" (no limit) or "QUOTA PERIOD".
std::optional<double> V2Limit(const std::string& dir) {
  const auto line = ReadFirstLine(dir + "/cpu.max");
  if (!line) return std::nullopt;
  std::istringstream in(*line);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return std::nullopt;
  try {
    const double q = std::stod(quota);
    return q > 0 && std::isfinite(q / period) ? std::optional<double>(q / period) : std::nullopt;
  } catch (...) {
    return std::nullopt;
  }
}

// cgroup v1's cpu.cfs_quota_us (-1: no limit) and cpu.cfs_period_us.
std::optional<double> V1Limit(const std::string& dir) {
  const auto quota = ReadFirstLine(dir + "/cpu.cfs_quota_us"), period = ReadFirstLine(dir + "/cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  try {
    const double q = std::stod(*quota), p = std::stod(*period);
    return q > 0 && p > 0 && std::isfinite(q / p) ? std::optional<double>(q / p) : std::nullopt;
  } catch (...) {
    return std::nullopt;
  }
}

// The smallest limit of `path` and its ancestors under `root` (inside a
// container the process's own cgroup is often the mount's root, "/").
template <typename Limit>
std::optional<double> SmallestUp(const std::string& root, std::string path, const Limit& limit) {
  std::optional<double> best;
  for (;;) {
    if (const auto l = limit(root + path); l && (!best || *l < *best)) best = l;
    if (path.empty() || path == "/") break;
    const auto slash = path.find_last_of('/');
    path = slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
  }
  return best;
}

}  // namespace

std::optional<double> CgroupCpuLimit(const std::string& cgroup_file, const std::string& v2_root,
                                     const std::string& v1_root) {
  std::ifstream in(cgroup_file);
  std::optional<double> best;
  auto consider = [&](std::optional<double> l) {
    if (l && (!best || *l < *best)) best = l;
  };
  // Lines "ID:CONTROLLERS:PATH": v2's is "0::PATH"; v1's cpu controller's
  // names cpu among its controllers ("4:cpu,cpuacct:PATH").
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      consider(SmallestUp(v2_root, path, V2Limit));
    } else {
      std::istringstream names(controllers);
      for (std::string name; std::getline(names, name, ',');)
        if (name == "cpu") consider(SmallestUp(v1_root, path, V1Limit));
    }
  }
  return best;
}

CpuBudget ReadCpuBudget() {
  CpuBudget b;
  cpu_set_t set;
  CPU_ZERO(&set);
  b.affinity = sched_getaffinity(0, sizeof(set), &set) == 0
                   ? CPU_COUNT(&set)
                   : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  b.affinity = std::max(b.affinity, 1);
  b.quota = CgroupCpuLimit();
  b.cpus = b.affinity;
  // A quota of 1.5 CPUs: two threads, as Go's and Java's runtimes round.
  // (Clamped as a double first: a quota past INT_MAX CPUs must not overflow the cast.)
  if (b.quota)
    b.cpus = std::max(1, static_cast<int>(std::ceil(std::min(*b.quota, static_cast<double>(b.affinity)) - 1e-9)));
  return b;
}

std::string CpuBudget::Describe() const {
  std::ostringstream out;
  out << cpus << " (affinity " << affinity << " CPUs, cgroup quota ";
  if (quota)
    out << *quota << " CPUs)";
  else
    out << "none)";
  return out.str();
}

}  // namespace ropeserve
