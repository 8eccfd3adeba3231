#include "server/engine/block_pool.h"

// XXH3_state_t on the stack (its layout is public with this macro).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <random>

namespace ropeserve {

namespace {

// XXH3 is fast but not a cryptographic hash: with a known seed, content
// could be crafted to collide with another prompt's block. A seed drawn at
// start-up, never shown, keeps that out of a client's reach (the cache
// lives in this process only; sha256_cbor, the hash shared with a router,
// is SHA-256).
std::uint64_t ProcessSeed() {
  static const std::uint64_t seed = [] {
    std::random_device device;
    return (static_cast<std::uint64_t>(device()) << 32) ^ device();
  }();
  return seed;
}

}  // namespace

BlockHash HashBlock(std::optional<BlockHash> parent, std::span<const TokenId> tokens, std::uint64_t extra) {
  // On the stack: a block's hash is taken for every full block of every
  // prompt, and XXH3_createState is a malloc.
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset_withSeed(&state, ProcessSeed());
  const std::uint64_t head[3] = {parent.has_value() ? 1u : 0u, parent ? parent->value : 0, extra};
  XXH3_64bits_update(&state, head, sizeof(head));
  XXH3_64bits_update(&state, tokens.data(), tokens.size_bytes());
  return BlockHash{XXH3_64bits_digest(&state)};
}

BlockPool::BlockPool(int num_blocks, int block_size, BlockHasher hasher)
    : block_size_(block_size), hasher_(std::move(hasher)), blocks_(num_blocks) {
  assert(num_blocks > 0 && block_size > 0);
  for (BlockId id = 0; id < num_blocks; ++id) blocks_[id].queue_pos = free_queue_.insert(free_queue_.end(), id);
}

std::uint64_t BlockPool::ChainKey(std::optional<std::uint64_t> parent_key, std::span<const TokenId> tokens,
                                  BlockHash hash) {
  std::optional<BlockHash> parent;
  if (parent_key) parent = BlockHash{*parent_key};
  return HashBlock(parent, tokens, hash.value).value;
}

std::optional<std::uint64_t> BlockPool::ChainKeyOf(BlockId id) const {
  const Block& b = blocks_.at(id);
  if (!b.cached) return std::nullopt;
  return b.cached->chain_key;
}

void BlockPool::Evict(BlockId id) {
  Block& b = blocks_[id];
  if (!b.cached) return;
  if (eviction_hook_) {
    const CachedContent& c = *b.cached;
    eviction_hook_(id, EvictedBlock{c.hash, c.parent, c.chain_key, c.parent_chain_key, c.tokens});
  }
  cached_.erase(b.cached->hash.value);
  if (listener_ != nullptr) listener_->OnBlockEvicted(b.cached->hash);
  b.cached.reset();
}

std::optional<std::vector<BlockId>> BlockPool::Allocate(int n) {
  if (n < 0 || n > num_free()) return std::nullopt;
  std::vector<BlockId> ids;
  ids.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const BlockId id = free_queue_.front();
    free_queue_.pop_front();
    Evict(id);
    blocks_[id].ref_count = 1;
    ids.push_back(id);
  }
  return ids;
}

void BlockPool::Free(std::span<const BlockId> ids) {
  for (BlockId id : ids) {
    Block& b = blocks_.at(id);
    assert(b.ref_count > 0 && "double free of a KV block");
    if (--b.ref_count == 0) b.queue_pos = free_queue_.insert(free_queue_.end(), id);
  }
}

void BlockPool::Touch(std::span<const BlockId> ids) {
  for (BlockId id : ids) {
    Block& b = blocks_.at(id);
    if (b.ref_count++ == 0) free_queue_.erase(b.queue_pos);
  }
}

bool BlockPool::IsParent(std::optional<BlockHash> parent, std::optional<BlockRef> parent_ref) const {
  if (parent.has_value() != parent_ref.has_value()) return false;
  if (!parent) return true;
  if (parent_ref->id < 0 || parent_ref->id >= num_blocks()) return false;
  const Block& p = blocks_[parent_ref->id];
  return p.cached && p.cached->hash == *parent && p.generation == parent_ref->generation;
}

std::optional<BlockRef> BlockPool::RefOf(BlockId id) const {
  const Block& b = blocks_.at(id);
  if (!b.cached) return std::nullopt;
  return BlockRef{id, b.generation};
}

std::optional<BlockId> BlockPool::FindCached(BlockHash hash, std::span<const TokenId> tokens,
                                             std::optional<BlockHash> parent,
                                             std::optional<BlockRef> parent_ref) const {
  if (!IsParent(parent, parent_ref)) return std::nullopt;
  auto it = cached_.find(hash.value);
  if (it == cached_.end()) return std::nullopt;
  const CachedContent& c = *blocks_[it->second].cached;
  if (c.parent == parent && c.parent_ref == parent_ref && c.tokens.size() == tokens.size() &&
      std::equal(c.tokens.begin(), c.tokens.end(), tokens.begin()))
    return it->second;
  return std::nullopt;
}

std::optional<BlockRef> BlockPool::CacheFullBlock(BlockId id, BlockHash hash, std::span<const TokenId> tokens,
                                                  std::optional<BlockHash> parent, std::optional<BlockRef> parent_ref) {
  assert(static_cast<int>(tokens.size()) == block_size_);
  if (!IsParent(parent, parent_ref)) return std::nullopt;
  // This content already has a block: that one. Another content with its
  // hash (a collision): it stays uncached.
  if (cached_.count(hash.value) != 0) {
    auto found = FindCached(hash, tokens, parent, parent_ref);
    return found ? RefOf(*found) : std::nullopt;
  }
  Evict(id);
  std::optional<std::uint64_t> parent_key;
  if (parent_ref) parent_key = blocks_[parent_ref->id].cached->chain_key;
  Block& b = blocks_.at(id);
  b.cached = CachedContent{hash,       parent,
                           parent_ref, ChainKey(parent_key, tokens, hash),
                           parent_key, std::vector<TokenId>(tokens.begin(), tokens.end())};
  ++b.generation;
  cached_.emplace(hash.value, id);
  if (listener_ != nullptr) listener_->OnBlockCached(hash, parent, tokens);
  return BlockRef{id, b.generation};
}

std::vector<std::uint64_t> BlockPool::CachedHashes() const {
  std::vector<std::uint64_t> hashes;
  hashes.reserve(cached_.size());
  for (const auto& [hash, id] : cached_) hashes.push_back(hash);
  std::sort(hashes.begin(), hashes.end());
  return hashes;
}

std::pair<std::vector<BlockId>, std::vector<BlockHash>> BlockPool::MatchPrefix(std::span<const TokenId> tokens,
                                                                               std::uint64_t extra) const {
  std::vector<BlockId> ids;
  std::vector<BlockHash> hashes;
  std::optional<BlockHash> parent;
  std::optional<BlockRef> parent_ref;
  const std::size_t full = tokens.size() / static_cast<std::size_t>(block_size_);
  for (std::size_t i = 0; i < full; ++i) {
    auto chunk = tokens.subspan(i * block_size_, block_size_);
    const BlockHash h = Hash(parent, chunk, extra);
    ++cache_queries_;
    auto id = FindCached(h, chunk, parent, parent_ref);
    if (!id) break;
    parent_ref = RefOf(*id);
    ++cache_hits_;
    ids.push_back(*id);
    hashes.push_back(h);
    parent = h;
  }
  return {ids, hashes};
}

BlockAllocation& BlockAllocation::operator=(BlockAllocation&& o) noexcept {
  if (this != &o) {
    Release();
    pool_ = o.pool_;
    ids_ = std::move(o.ids_);
    o.pool_ = nullptr;
  }
  return *this;
}

void BlockAllocation::Release() {
  if (pool_ != nullptr && !ids_.empty()) {
    std::vector<BlockId> reversed(ids_.rbegin(), ids_.rend());  // prefix evicted last
    pool_->Free(reversed);
  }
  ids_.clear();
}

}  // namespace ropeserve
