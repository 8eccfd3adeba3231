// How many KV blocks a memory budget buys. Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "server/common/status.h"

namespace ropeserve {

// "--kv-cache-memory": bytes with an optional K/M/G/T suffix (powers of
// 1024), e.g. "4G", "1073741824", or a fraction of `available_bytes` in
// (0, 1], e.g. "0.25".
// `flag` names the flag in errors.
StatusOr<std::int64_t> ParseKvCacheMemory(const std::string& text, std::int64_t available_bytes,
                                          const std::string& flag = "--kv-cache-memory");

// MemAvailable from /proc/meminfo (bytes); 0 if unknown.
std::int64_t AvailableHostMemory();

struct KvCacheSize {
  std::int64_t num_blocks = 0;
  std::int64_t tokens = 0;
  std::int64_t bytes = 0;
};

// Blocks of `block_size` tokens at `bytes_per_token` that fit in `budget`;
// an error (with the numbers) if they cannot hold `min_tokens`.
StatusOr<KvCacheSize> SizeKvCache(std::int64_t budget_bytes, std::int64_t bytes_per_token, std::int64_t block_size,
                                  std::int64_t min_tokens);

// The cache an engine gets: `kv_cache_memory` (as ParseKvCacheMemory reads
// it, a fraction taken of `available_bytes`: the host's MemAvailable when
// negative, a CUDA worker's KV budget otherwise; "auto" is 0.25 of the
// host's or 1.0 of the device's) capped at what `max_num_seqs` sequences of
// `max_model_len` tokens can ever use, since more would sit idle.
StatusOr<KvCacheSize> SizeKvCacheForEngine(const std::string& kv_cache_memory, std::int64_t bytes_per_token,
                                           std::int64_t block_size, std::int64_t max_model_len,
                                           std::int64_t max_num_seqs, std::int64_t available_bytes = -1);

}  // namespace ropeserve
