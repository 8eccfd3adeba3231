#include "server/engine/kv_offload.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace ropeserve {

KvOffloadTier::KvOffloadTier(int num_slots) : slots_(static_cast<std::size_t>(std::max(num_slots, 0))) {
  for (int s = num_slots - 1; s >= 0; --s) free_.push_back(s);
}

std::optional<int> KvOffloadTier::Store(const EvictedBlock& block, std::vector<BlockHash>* dropped) {
  if (auto it = by_key_.find(block.chain_key); it != by_key_.end()) {
    Slot& held = slots_[it->second];
    lru_.splice(lru_.end(), lru_, held.lru_pos);
    return std::nullopt;
  }
  int slot = -1;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    auto victim = std::find_if(lru_.begin(), lru_.end(), [&](int s) { return slots_[s].pins == 0; });
    if (victim == lru_.end()) return std::nullopt;
    slot = *victim;
    Slot& old = slots_[slot];
    by_key_.erase(old.key);
    lru_.erase(victim);
    if (dropped != nullptr) dropped->push_back(old.hash);
  }
  Slot& s = slots_[slot];
  s.used = true;
  s.hash = block.hash;
  s.key = block.chain_key;
  s.parent_key = block.parent_chain_key;
  s.tokens.assign(block.tokens.begin(), block.tokens.end());
  s.lru_pos = lru_.insert(lru_.end(), slot);
  by_key_.emplace(block.chain_key, slot);
  return slot;
}

std::optional<int> KvOffloadTier::Find(std::uint64_t key, std::span<const TokenId> tokens,
                                       std::optional<std::uint64_t> parent_key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  Slot& s = slots_[it->second];
  if (s.parent_key != parent_key || !std::equal(s.tokens.begin(), s.tokens.end(), tokens.begin(), tokens.end()))
    return std::nullopt;
  lru_.splice(lru_.end(), lru_, s.lru_pos);
  return it->second;
}

BlockHash KvOffloadTier::Drop(int slot) {
  Slot& s = slots_.at(slot);
  assert(s.used);
  by_key_.erase(s.key);
  lru_.erase(s.lru_pos);
  s.used = false;
  s.tokens.clear();
  free_.push_back(slot);
  return s.hash;
}

void KvOffloadTier::Pin(int slot) { ++slots_.at(slot).pins; }

void KvOffloadTier::Unpin(int slot) {
  assert(slots_.at(slot).pins > 0);
  --slots_.at(slot).pins;
}

std::vector<std::uint64_t> KvOffloadTier::Hashes() const {
  std::vector<std::uint64_t> out;
  out.reserve(by_key_.size());
  for (const auto& [key, slot] : by_key_) out.push_back(slots_[slot].hash.value);
  std::sort(out.begin(), out.end());
  return out;
}

KvOffloader::KvOffloader(BlockPool& pool, int num_slots, KvBlockMover& mover, KvEventRecorder* events)
    : pool_(pool), tier_(num_slots), mover_(mover), events_(events) {
  pool_.SetEvictionHook([this](BlockId id, const EvictedBlock& block) { OnEvict(id, block); });
}

void KvOffloader::OnEvict(BlockId id, const EvictedBlock& block) {
  std::vector<BlockHash> dropped;
  std::optional<int> slot = tier_.Store(block, &dropped);
  stats_.dropped_blocks += dropped.size();
  if (events_ != nullptr)
    for (BlockHash h : dropped) events_->OnOffloadDropped(h);
  if (!slot) {
    // Held already (nothing to copy), or every slot pinned by a load.
    if (!tier_.Holds(block.chain_key)) ++stats_.skipped_saves;
    return;
  }
  pending_.emplace_back(id, *slot);
  if (events_ != nullptr) events_->OnBlockOffloaded(block.hash, block.parent, block.tokens);
}

void KvOffloader::Flush() {
  if (pending_.empty()) return;
  std::vector<std::pair<BlockId, int>> moves = std::exchange(pending_, {});
  try {
    mover_.SaveBlocks(moves);
  } catch (...) {
    ++stats_.failed_copies;
    for (const auto& [block, slot] : moves) {
      const BlockHash h = tier_.Drop(slot);
      if (events_ != nullptr) events_->OnOffloadDropped(h);
    }
    return;
  }
  stats_.saved_blocks += moves.size();
}

KvOffloader::Continuation KvOffloader::Find(std::span<const TokenId> tokens, std::span<const BlockId> matched_ids,
                                            std::span<const BlockHash> matched_hashes, std::uint64_t extra) {
  Continuation c;
  if (tier_.num_used() == 0) return c;
  const std::size_t bs = static_cast<std::size_t>(pool_.block_size());
  std::optional<BlockHash> parent;
  std::optional<std::uint64_t> parent_key;
  if (!matched_ids.empty()) {
    parent = matched_hashes.back();
    parent_key = pool_.ChainKeyOf(matched_ids.back());
    if (!parent_key) return c;
  }
  for (std::size_t i = matched_ids.size(); i < tokens.size() / bs; ++i) {
    std::span<const TokenId> chunk = tokens.subspan(i * bs, bs);
    const BlockHash h = pool_.Hash(parent, chunk, extra);
    const std::uint64_t key = BlockPool::ChainKey(parent_key, chunk, h);
    std::optional<int> slot = tier_.Find(key, chunk, parent_key);
    if (!slot) break;
    c.slots.push_back(*slot);
    c.hashes.push_back(h);
    parent = h;
    parent_key = key;
  }
  return c;
}

std::optional<std::vector<BlockId>> KvOffloader::Load(const Continuation& c) {
  if (c.slots.empty()) return std::vector<BlockId>{};
  // The blocks the allocation evicts go to the tier too: never over the
  // slots about to be read.
  for (int s : c.slots) tier_.Pin(s);
  std::optional<std::vector<BlockId>> ids = pool_.Allocate(static_cast<int>(c.slots.size()));
  Flush();  // what the allocation evicted leaves before anything is overwritten
  if (ids) {
    std::vector<std::pair<int, BlockId>> moves;
    for (std::size_t i = 0; i < ids->size(); ++i) moves.emplace_back(c.slots[i], (*ids)[i]);
    try {
      mover_.LoadBlocks(moves);
      stats_.loaded_blocks += moves.size();
    } catch (...) {
      ++stats_.failed_copies;  // the blocks are computed instead
      pool_.Free(*ids);
      ids.reset();
    }
  }
  for (int s : c.slots) tier_.Unpin(s);
  return ids;
}

}  // namespace ropeserve
