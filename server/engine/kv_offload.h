// The host-memory KV tier (serve --kv-offload-memory): full blocks the
// prefix cache evicts are copied into a larger tier of slots in host memory
// (an LRU of its own), and a request whose prefix continues there has those
// blocks copied back into fresh cache blocks instead of computed again
// (vLLM's OffloadingConnector, SGLang's HiCache, llama.cpp's --cache-ram).
// Many questions over one long document, with other traffic between them,
// then pay the document's prefill once.
//
// The tier is keyed by the secret chain key of each block's whole prefix
// (BlockPool::ChainKey: XXH3 with the process's hidden seed) and a hit
// compares the block's tokens and its parent's key, so a public hash
// collision (the sha256_cbor a router computes) never reads another
// prompt's K/V. Torch-free: the copies are a KvBlockMover's (the runner's).
// Threading: the engine thread only.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/engine/block_pool.h"
#include "server/engine/kv_events.h"

namespace ropeserve {

// Copies whole blocks of K/V (every layer) between the KV cache and the
// tier's slots; the runner implements it over its tensors. Called on the
// engine thread between steps: a copy is done when the call returns, or
// (a CUDA runner's) ordered after the forwards queued before it and before
// the next one.
class KvBlockMover {
 public:
  virtual ~KvBlockMover() = default;
  // Cache block -> tier slot, for each pair.
  virtual void SaveBlocks(std::span<const std::pair<BlockId, int>> moves) = 0;
  // Tier slot -> cache block, for each pair.
  virtual void LoadBlocks(std::span<const std::pair<int, BlockId>> moves) = 0;
};

// The tier's bookkeeping: which slot holds which block content, LRU order,
// slots pinned while a load is prepared. No data.
class KvOffloadTier {
 public:
  explicit KvOffloadTier(int num_slots);

  int num_slots() const { return static_cast<int>(slots_.size()); }
  int num_used() const { return static_cast<int>(by_key_.size()); }

  // A slot for `block`: the least recently used one, its content dropped
  // (its hash appended to `dropped`); nullopt when the content is held
  // already (then it becomes the most recent) or every slot is pinned.
  std::optional<int> Store(const EvictedBlock& block, std::vector<BlockHash>* dropped);
  // The slot holding the block whose chain key is `key`, if its tokens and
  // parent key are these (a match marks it most recently used).
  std::optional<int> Find(std::uint64_t key, std::span<const TokenId> tokens, std::optional<std::uint64_t> parent_key);
  bool Holds(std::uint64_t key) const { return by_key_.count(key) != 0; }
  // Forgets the slot's content (its copy failed); returns its hash.
  BlockHash Drop(int slot);
  // A pinned slot is never dropped by Store.
  void Pin(int slot);
  void Unpin(int slot);
  // The hashes of every block held, ascending.
  std::vector<std::uint64_t> Hashes() const;

 private:
  struct Slot {
    bool used = false;
    int pins = 0;
    BlockHash hash;
    std::uint64_t key = 0;
    std::optional<std::uint64_t> parent_key;
    std::vector<TokenId> tokens;
    std::list<int>::iterator lru_pos;  // valid while used
  };
  std::vector<Slot> slots_;
  std::vector<int> free_;                          // slots never used or dropped
  std::list<int> lru_;                             // used slots, least recent first
  std::unordered_map<std::uint64_t, int> by_key_;  // chain key -> slot
};

// Counters of the tier, for metrics; read on the engine thread.
struct KvOffloadStats {
  std::uint64_t saved_blocks = 0;   // copied from the cache into the tier
  std::uint64_t loaded_blocks = 0;  // copied back into the cache
  std::uint64_t dropped_blocks = 0;
  std::uint64_t skipped_saves = 0;  // evicted while every slot was pinned
  std::uint64_t failed_copies = 0;  // copy calls that threw (their blocks dropped or recomputed)
};

// The engine's side of the tier: saves what the block pool evicts (batched
// until Flush, which runs before any load and before each forward), finds
// and loads a prompt's continuation, and records the tier's changes as KV
// events (KvEvent::offloaded) when a recorder is given.
class KvOffloader {
 public:
  KvOffloader(BlockPool& pool, int num_slots, KvBlockMover& mover, KvEventRecorder* events = nullptr);
  KvOffloader(const KvOffloader&) = delete;
  KvOffloader& operator=(const KvOffloader&) = delete;

  // The blocks after the `matched` full blocks of `tokens` (already in the
  // cache, in `matched_ids`) that the tier holds, in a row: the number of
  // such blocks. `extra` is the request's cache salt.
  struct Continuation {
    std::vector<int> slots;
    std::vector<BlockHash> hashes;
  };
  Continuation Find(std::span<const TokenId> tokens, std::span<const BlockId> matched_ids,
                    std::span<const BlockHash> matched_hashes, std::uint64_t extra);
  // Copies the continuation's blocks into fresh cache blocks: their ids
  // (the caller caches them, as blocks it computed), or nullopt when the
  // pool has no room or the copy failed.
  std::optional<std::vector<BlockId>> Load(const Continuation& c);
  // Runs the saves collected since the last call. A copy that fails drops
  // its blocks from the tier (never serving what it may not hold).
  void Flush();

  const KvOffloadTier& tier() const { return tier_; }
  const KvOffloadStats& stats() const { return stats_; }

 private:
  void OnEvict(BlockId id, const EvictedBlock& block);

  BlockPool& pool_;
  KvOffloadTier tier_;
  KvBlockMover& mover_;
  KvEventRecorder* events_;
  std::vector<std::pair<BlockId, int>> pending_;
  KvOffloadStats stats_;
};

}  // namespace ropeserve
