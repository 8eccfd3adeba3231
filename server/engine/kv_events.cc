#include "server/engine/kv_events.h"

#include <utility>

namespace ropeserve {

void KvEventRecorder::OnBlockCached(BlockHash hash, std::optional<BlockHash> parent, std::span<const TokenId> tokens) {
  Stored(hash, parent, tokens, false);
}

void KvEventRecorder::OnBlockEvicted(BlockHash hash) { Removed(hash, false); }

void KvEventRecorder::OnBlockOffloaded(BlockHash hash, std::optional<BlockHash> parent,
                                       std::span<const TokenId> tokens) {
  Stored(hash, parent, tokens, true);
}

void KvEventRecorder::OnOffloadDropped(BlockHash hash) { Removed(hash, true); }

void KvEventRecorder::Stored(BlockHash hash, std::optional<BlockHash> parent, std::span<const TokenId> tokens,
                             bool offloaded) {
  if (!events_.empty()) {
    KvEvent& last = events_.back();
    // The next block of the chain the last event stored: one event.
    if (last.kind == KvEvent::Kind::kBlockStored && last.offloaded == offloaded && parent == last.block_hashes.back()) {
      last.block_hashes.push_back(hash);
      last.token_ids.insert(last.token_ids.end(), tokens.begin(), tokens.end());
      return;
    }
  }
  KvEvent e;
  e.kind = KvEvent::Kind::kBlockStored;
  e.block_hashes.push_back(hash);
  e.parent = parent;
  e.token_ids.assign(tokens.begin(), tokens.end());
  e.offloaded = offloaded;
  events_.push_back(std::move(e));
}

void KvEventRecorder::Removed(BlockHash hash, bool offloaded) {
  if (!events_.empty() && events_.back().kind == KvEvent::Kind::kBlockRemoved &&
      events_.back().offloaded == offloaded) {
    events_.back().block_hashes.push_back(hash);
    return;
  }
  KvEvent e;
  e.kind = KvEvent::Kind::kBlockRemoved;
  e.block_hashes.push_back(hash);
  e.offloaded = offloaded;
  events_.push_back(std::move(e));
}

void KvEventRecorder::AllCleared() {
  events_.clear();  // nothing before a clear matters to a subscriber
  KvEvent e;
  e.kind = KvEvent::Kind::kAllBlocksCleared;
  events_.push_back(std::move(e));
}

std::vector<KvEvent> KvEventRecorder::Take() { return std::exchange(events_, {}); }

}  // namespace ropeserve
