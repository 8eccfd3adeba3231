// The host KV tier's storage and copies, for ModelRunner's
// AllocateOffloadTier / SaveBlocks / LoadBlocks (server/engine/kv_offload.h
// decides what moves; this moves it). Slots are shaped as the cache's
// blocks, one tensor per layer of K and of V, on the host: pinned when the
// cache is on a CUDA device, or in a file (CPU workers, --kv-offload-path).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "server/models/paged_model.h"

namespace ropeserve {

class KvTier {
 public:
  // num_slots slots for `cache`'s blocks; `directory` non-empty: in a new
  // file there (reserved on the disk, mapped shared, unlinked at once; CPU
  // caches only). Throws std::runtime_error when that cannot be done.
  KvTier(const PagedKvCache& cache, std::int64_t num_slots, const std::string& directory);
  ~KvTier();
  KvTier(const KvTier&) = delete;
  KvTier& operator=(const KvTier&) = delete;

  // Each (block, slot): the cache's block into the tier's slot (Save) or
  // back (Load). On a CUDA device the copies are queued on the tier's own
  // stream, after what the compute stream has queued and before what it
  // queues next; the host does not wait.
  void Save(const PagedKvCache& cache, std::span<const std::pair<std::int64_t, std::int64_t>> block_slot);
  void Load(PagedKvCache& cache, std::span<const std::pair<std::int64_t, std::int64_t>> block_slot);

 private:
  void CopyOnItsStream(const PagedKvCache& cache, std::span<const std::pair<std::int64_t, std::int64_t>> block_slot,
                       bool save);

  PagedKvCache slots_;
  struct Stream;
  std::unique_ptr<Stream> stream_;  // CUDA: the copies' stream, made on first use
};

}  // namespace ropeserve
