#include "server/common/process_stats.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ropeserve {

bool ParseProcStat(std::string_view line, double ticks_per_second, double page_bytes, double boot_time_seconds,
                   ProcessStats& out) {
  const auto close = line.rfind(')');
  if (close == std::string_view::npos || ticks_per_second <= 0) return false;
  // Fields from the 3rd (state) on, split at spaces.
  std::vector<std::string_view> f;
  std::size_t i = close + 1;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\n')) ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\n') ++j;
    if (j > i) f.push_back(line.substr(i, j - i));
    i = j;
  }
  // proc(5) numbers fields from 1 (pid); f[0] is field 3.
  auto field = [&](int n, double& v) {
    const std::size_t k = static_cast<std::size_t>(n - 3);
    if (k >= f.size()) return false;
    unsigned long long x = 0;
    const auto r = std::from_chars(f[k].data(), f[k].data() + f[k].size(), x);
    if (r.ec != std::errc() || r.ptr != f[k].data() + f[k].size()) return false;
    v = static_cast<double>(x);
    return true;
  };
  double utime = 0, stime = 0, start = 0, vsize = 0, rss = 0;
  if (!field(14, utime) || !field(15, stime) || !field(22, start) || !field(23, vsize) || !field(24, rss)) return false;
  out.cpu_seconds = (utime + stime) / ticks_per_second;
  out.start_time_seconds = boot_time_seconds + start / ticks_per_second;
  out.virtual_bytes = vsize;
  out.resident_bytes = rss * page_bytes;
  return true;
}

std::optional<ProcessStats> ReadProcessStats() {
  std::ifstream stat_file("/proc/self/stat");
  std::string line;
  if (!std::getline(stat_file, line)) return std::nullopt;
  double boot = 0;
  std::ifstream system_stat("/proc/stat");
  for (std::string l; std::getline(system_stat, l);) {
    if (l.rfind("btime ", 0) == 0) {
      boot = std::strtod(l.c_str() + 6, nullptr);
      break;
    }
  }
  ProcessStats s;
  if (!ParseProcStat(line, static_cast<double>(sysconf(_SC_CLK_TCK)), static_cast<double>(sysconf(_SC_PAGESIZE)), boot,
                     s))
    return std::nullopt;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    s.open_fds += 1;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) s.max_fds = static_cast<double>(lim.rlim_cur);
  return s;
}

}  // namespace ropeserve
