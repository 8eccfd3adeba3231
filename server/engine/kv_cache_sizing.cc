#include "server/engine/kv_cache_sizing.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

namespace ropeserve {

StatusOr<std::int64_t> ParseKvCacheMemory(const std::string& text, std::int64_t available_bytes,
                                          const std::string& flag) {
  const Status bad = InvalidArgument(flag + " '" + text +
                                     "' must be bytes (e.g. 4G, 512M, 1073741824) or a fraction in (0, 1] of "
                                     "available memory (e.g. 0.25)");
  if (text.empty()) return bad;
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return bad;
  }
  std::string suffix = text.substr(used);
  if (!std::isfinite(value) || value <= 0) return bad;
  if (suffix.empty() && text.find('.') != std::string::npos) {
    if (value > 1.0) return bad;
    if (available_bytes <= 0) return FailedPrecondition("cannot read available memory; give " + flag + " in bytes");
    return static_cast<std::int64_t>(value * static_cast<double>(available_bytes));
  }
  double scale = 1;
  if (suffix.size() == 1 || (suffix.size() == 2 && std::toupper(suffix[1]) == 'B') ||
      (suffix.size() == 3 && std::toupper(suffix[1]) == 'I' && std::toupper(suffix[2]) == 'B')) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K':
        scale = 1024.0;
        break;
      case 'M':
        scale = 1024.0 * 1024;
        break;
      case 'G':
        scale = 1024.0 * 1024 * 1024;
        break;
      case 'T':
        scale = 1024.0 * 1024 * 1024 * 1024;
        break;
      default:
        return bad;
    }
  } else if (!suffix.empty()) {
    return bad;
  }
  const double bytes = value * scale;
  if (bytes > 9e18) return bad;
  return static_cast<std::int64_t>(bytes);
}

std::int64_t AvailableHostMemory() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream ss(line.substr(13));
      std::int64_t kb = 0;
      ss >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

StatusOr<KvCacheSize> SizeKvCache(std::int64_t budget_bytes, std::int64_t bytes_per_token, std::int64_t block_size,
                                  std::int64_t min_tokens) {
  if (bytes_per_token <= 0 || block_size <= 0) return InvalidArgument("bad KV geometry");
  KvCacheSize s;
  s.num_blocks = budget_bytes / (bytes_per_token * block_size);
  s.tokens = s.num_blocks * block_size;
  s.bytes = s.tokens * bytes_per_token;
  if (s.tokens < min_tokens)
    return InvalidArgument("--kv-cache-memory of " + std::to_string(budget_bytes) + " bytes holds " +
                           std::to_string(s.tokens) + " tokens (" + std::to_string(bytes_per_token) +
                           " bytes each), fewer than one sequence of --max-model-len " + std::to_string(min_tokens) +
                           "; give more memory or a smaller --max-model-len");
  return s;
}

StatusOr<KvCacheSize> SizeKvCacheForEngine(const std::string& kv_cache_memory, std::int64_t bytes_per_token,
                                           std::int64_t block_size, std::int64_t max_model_len,
                                           std::int64_t max_num_seqs, std::int64_t available_bytes) {
  // "auto": a quarter of the host's available memory (a CPU worker shares
  // it with everything else), all of a device's budget.
  const std::string spec = kv_cache_memory != "auto" ? kv_cache_memory : available_bytes < 0 ? "0.25" : "1.0";
  RS_ASSIGN_OR_RETURN(std::int64_t budget,
                      ParseKvCacheMemory(spec, available_bytes < 0 ? AvailableHostMemory() : available_bytes));
  const std::int64_t useful_tokens = max_model_len * max_num_seqs + block_size;
  budget = std::min(budget, useful_tokens * bytes_per_token);
  return SizeKvCache(budget, bytes_per_token, block_size, max_model_len);
}

}  // namespace ropeserve
