// The process's CPU time, memory and file descriptors, read from Linux's
// /proc, for the standard Prometheus `process_*` metrics (prometheus-cpp
// 1.0 has no process collector).
#pragma once

#include <optional>
#include <string_view>

namespace ropeserve {

struct ProcessStats {
  double cpu_seconds = 0;  // user + system
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double start_time_seconds = 0;  // since the Unix epoch
  double open_fds = 0;
  double max_fds = 0;
};

// This process's figures; nullopt where /proc cannot be read.
std::optional<ProcessStats> ReadProcessStats();

// The fields of a /proc/<pid>/stat line (proc(5)) into `out`: utime,
// stime, starttime, vsize, rss. The command name may hold spaces and
// parentheses: fields are counted after its last ')'. False when the line
// is not of that form.
bool ParseProcStat(std::string_view line, double ticks_per_second, double page_bytes, double boot_time_seconds,
                   ProcessStats& out);

}  // namespace ropeserve
