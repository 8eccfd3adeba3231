// KV-cache block bookkeeping: a fixed pool of blocks of `block_size` token
// slots, reference counts, and prefix caching of full blocks by chained
// content hash with LRU eviction. Plain data, no LibTorch: the runner owns
// the tensors, this class only decides which block ids hold what.
//
// Semantics (as vLLM's v1 block pool):
//  - A block with ref_count 0 sits in the free queue. If it holds a cached
//    full block, it keeps its hash there and can still be hit, until an
//    allocation pops it from the head of the queue (eviction).
//  - Freed blocks go to the tail of the queue, in the order given: callers
//    free a sequence's blocks last-to-first so its prefix is evicted last.
//  - "No room" is a value: Allocate returns std::nullopt and changes nothing.
//  - One block per hash value: content whose hash another cached content
//    already has (a collision) is not cached, so a hash names one block and
//    the KV cache events (kv_events.h) name blocks by hash alone.
//  - A cached block is linked to the cached block that held its parent
//    when it was cached (block id and that block's generation), not to the
//    parent's hash: a match walks the links, so content whose parent hash
//    collides with another content's (a 64-bit hash a client can search
//    for collisions when the seed is known, as vLLM's sha256_cbor with
//    PYTHONHASHSEED) never continues that other chain.
// Threading: not thread-safe; owned by the engine thread.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/common/token_id.h"

namespace ropeserve {

using BlockId = std::int32_t;

// Content hash of a full block, chained over the blocks before it so a hit
// implies the whole prefix matches.
struct BlockHash {
  std::uint64_t value = 0;
  bool operator==(const BlockHash&) const = default;
};

// Hash of `tokens` (one full block) following the block hashed `parent`
// (nullopt for the first block). `extra` distinguishes otherwise equal
// content (e.g. a LoRA or model id); 0 when unused.
// XXH3-64 over (parent, extra, tokens), seeded at random once per process:
// the default, and the fastest.
BlockHash HashBlock(std::optional<BlockHash> parent, std::span<const TokenId> tokens, std::uint64_t extra = 0);

// How a pool hashes full blocks: HashBlock's signature. Serve may choose
// another (server/kv_events/vllm_block_hash.h: vLLM's and llm-d's
// SHA-256 over CBOR, so a router that hashes prompts agrees with the
// events); it must be deterministic and chain over `parent`.
using BlockHasher =
    std::function<BlockHash(std::optional<BlockHash> parent, std::span<const TokenId> tokens, std::uint64_t extra)>;

// What the prefix cache gains and loses, told as it happens (the engine's
// KV cache events). Called inside BlockPool's methods: quick, no calls back.
class BlockPoolListener {
 public:
  virtual ~BlockPoolListener() = default;
  // `id` now caches the full block `hash` (chained on `parent`) of `tokens`.
  virtual void OnBlockCached(BlockHash hash, std::optional<BlockHash> parent, std::span<const TokenId> tokens) = 0;
  // The block cached as `hash` was evicted (its slot reused).
  virtual void OnBlockEvicted(BlockHash hash) = 0;
};

// What a cached block holds, as the pool hands it to its eviction hook
// before the block is reused (its K/V still intact). `chain_key` names the
// whole prefix up to and including this block with the process's secret
// XXH3 chain (BlockPool::ChainKey): unlike `hash`, which a router may
// compute, no client can search it for collisions.
struct EvictedBlock {
  BlockHash hash;
  std::optional<BlockHash> parent;
  std::uint64_t chain_key = 0;
  std::optional<std::uint64_t> parent_chain_key;
  std::span<const TokenId> tokens;
};

// One content a block cached: which block, and which of the contents it
// has cached (its generation). Stale once the block caches another.
struct BlockRef {
  BlockId id = -1;
  std::uint64_t generation = 0;
  bool operator==(const BlockRef&) const = default;
};

class BlockPool {
 public:
  // `hasher` empty: HashBlock.
  BlockPool(int num_blocks, int block_size, BlockHasher hasher = {});
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int block_size() const { return block_size_; }
  // Blocks an Allocate can take now (free, including evictable cached ones).
  int num_free() const { return static_cast<int>(free_queue_.size()); }
  int ref_count(BlockId id) const { return blocks_.at(id).ref_count; }
  // Cache usage in [0, 1]: blocks referenced by running sequences.
  double usage() const { return 1.0 - static_cast<double>(num_free()) / num_blocks(); }

  // `n` blocks with ref_count 1, taken from the head of the free queue
  // (evicting cached content), or nullopt if fewer than n are free.
  std::optional<std::vector<BlockId>> Allocate(int n);

  // Drops one reference from each block, in order; blocks reaching 0 join
  // the tail of the free queue (keeping any cached hash).
  void Free(std::span<const BlockId> ids);

  // Adds one reference to each block (a prefix-cache hit, or sharing a
  // sequence's blocks with a fork); a free block leaves the free queue.
  void Touch(std::span<const BlockId> ids);

  // The pool's hash of a full block (`extra` separates namespaces: a
  // request's cache salt).
  BlockHash Hash(std::optional<BlockHash> parent, std::span<const TokenId> tokens, std::uint64_t extra = 0) const {
    return hasher_ ? hasher_(parent, tokens, extra) : HashBlock(parent, tokens, extra);
  }
  // Set before use; `listener` must outlive the pool (null: none).
  void SetListener(BlockPoolListener* listener) { listener_ = listener; }
  // The hashes of every cached full block, ascending (what the KV cache
  // events, replayed in order, must reproduce).
  std::vector<std::uint64_t> CachedHashes() const;

  // Records that `id` now holds the full block with this hash and tokens,
  // whose parent content (hash `parent`) is the cached content `parent_ref`
  // (both nullopt for a prompt's first block). Returns the content that
  // caches it now: `id`'s, or the one that already did; nullopt when it
  // cannot be cached (another content has this hash value, or `parent_ref`
  // is stale).
  std::optional<BlockRef> CacheFullBlock(BlockId id, BlockHash hash, std::span<const TokenId> tokens,
                                         std::optional<BlockHash> parent, std::optional<BlockRef> parent_ref);

  // The block caching this content after the cached content `parent_ref`
  // (nullopt: a first block), if any: tokens, parent hash and the link to
  // that parent are compared, so a hash collision can never return the
  // wrong block. Does not Touch.
  std::optional<BlockId> FindCached(BlockHash hash, std::span<const TokenId> tokens, std::optional<BlockHash> parent,
                                    std::optional<BlockRef> parent_ref) const;
  // The content block `id` caches now, if any.
  std::optional<BlockRef> RefOf(BlockId id) const;

  // Longest run of cached full blocks for `tokens` from the start: returns
  // their ids and hashes (the caller Touches the ids it uses).
  std::pair<std::vector<BlockId>, std::vector<BlockHash>> MatchPrefix(std::span<const TokenId> tokens,
                                                                      std::uint64_t extra = 0) const;

  // The secret chain key of the block hashed `hash` holding `tokens` after
  // the prefix whose key is `parent_key` (nullopt: a first block).
  static std::uint64_t ChainKey(std::optional<std::uint64_t> parent_key, std::span<const TokenId> tokens,
                                BlockHash hash);
  // The chain key of the content block `id` caches now, if any.
  std::optional<std::uint64_t> ChainKeyOf(BlockId id) const;
  // Called with each cached block an allocation is about to reuse, before
  // its content is dropped (the host tier copies it out). Set before use.
  using EvictionHook = std::function<void(BlockId, const EvictedBlock&)>;
  void SetEvictionHook(EvictionHook hook) { eviction_hook_ = std::move(hook); }

  // Prefix-cache statistics since construction.
  std::uint64_t cache_queries() const { return cache_queries_; }
  std::uint64_t cache_hits() const { return cache_hits_; }

 private:
  struct CachedContent {
    BlockHash hash;
    std::optional<BlockHash> parent;
    std::optional<BlockRef> parent_ref;  // the parent's cached block when this was cached
    std::uint64_t chain_key = 0;
    std::optional<std::uint64_t> parent_chain_key;
    std::vector<TokenId> tokens;
  };
  struct Block {
    int ref_count = 0;
    std::optional<CachedContent> cached;
    std::uint64_t generation = 0;            // bumped each time the block caches a content
    std::list<BlockId>::iterator queue_pos;  // valid while ref_count == 0
  };
  void Evict(BlockId id);
  // Whether `parent_ref` names the cached content hashed `parent` now (both
  // nullopt: a first block).
  bool IsParent(std::optional<BlockHash> parent, std::optional<BlockRef> parent_ref) const;

  int block_size_;
  BlockHasher hasher_;
  BlockPoolListener* listener_ = nullptr;
  EvictionHook eviction_hook_;
  std::vector<Block> blocks_;
  std::list<BlockId> free_queue_;                      // head = next to reuse
  std::unordered_map<std::uint64_t, BlockId> cached_;  // hash -> the block holding it
  mutable std::uint64_t cache_queries_ = 0;
  mutable std::uint64_t cache_hits_ = 0;
};

// Move-only owner of a sequence's block references; frees them (last block
// first) when destroyed, so a cancelled or dropped request cannot leak KV
// cache.
class BlockAllocation {
 public:
  BlockAllocation() = default;
  BlockAllocation(BlockPool* pool, std::vector<BlockId> ids) : pool_(pool), ids_(std::move(ids)) {}
  BlockAllocation(BlockAllocation&& o) noexcept : pool_(o.pool_), ids_(std::move(o.ids_)) { o.pool_ = nullptr; }
  BlockAllocation& operator=(BlockAllocation&& o) noexcept;
  BlockAllocation(const BlockAllocation&) = delete;
  BlockAllocation& operator=(const BlockAllocation&) = delete;
  ~BlockAllocation() { Release(); }

  const std::vector<BlockId>& ids() const { return ids_; }
  // Takes ownership of more references (already counted in the pool).
  void Append(std::span<const BlockId> ids) { ids_.insert(ids_.end(), ids.begin(), ids.end()); }
  // Returns every block to the pool; the handle stays bound to the pool and
  // may Append again.
  void Release();

 private:
  BlockPool* pool_ = nullptr;
  std::vector<BlockId> ids_;
};

}  // namespace ropeserve
