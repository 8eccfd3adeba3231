// KV cache events: what the prefix cache gained and lost in each engine
// step, for a router that routes requests to the replica holding their
// prefix (llm-d's precise prefix-cache scorer, from vLLM's
// --kv-events-config). The engine records them (KvEventRecorder listens to
// its block pool) and hands one batch per step that changed the cache to a
// KvEventSink; serve's sink publishes them over ZeroMQ
// (server/kv_events/zmq_publisher.h). Plain data, no transport here.
//
// Replayed in order, the events reproduce the set of cached block hashes:
// BlockStored adds its hashes, BlockRemoved removes its, AllBlocksCleared
// empties the set (the engine sends one when it starts: a new process's
// cache is empty).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "server/engine/block_pool.h"

namespace ropeserve {

struct KvEvent {
  enum class Kind { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Kind kind = Kind::kBlockStored;
  // Stored: a chain of full blocks, each the parent of the next; removed:
  // any blocks.
  std::vector<BlockHash> block_hashes;
  // Stored: the parent of the first block (none for a prompt's first).
  std::optional<BlockHash> parent;
  // Stored: the blocks' tokens, block_size per hash, in order.
  std::vector<TokenId> token_ids;
  // The host tier's change (kv_offload.h), not the cache's: its own medium
  // on the wire.
  bool offloaded = false;
};

struct KvEventBatch {
  double timestamp = 0;  // seconds since the Unix epoch
  std::vector<KvEvent> events;
};

// Where the engine hands its batches. Called on the engine thread, once per
// step that changed the cache: must be quick, never wait, never throw.
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  virtual void Publish(KvEventBatch batch) = 0;
};

// Collects a block pool's changes into events as vLLM groups them: blocks
// cached one after another along one chain form one BlockStored; removals
// in a row form one BlockRemoved.
class KvEventRecorder : public BlockPoolListener {
 public:
  void OnBlockCached(BlockHash hash, std::optional<BlockHash> parent, std::span<const TokenId> tokens) override;
  void OnBlockEvicted(BlockHash hash) override;
  // The host tier's changes, recorded the same way with `offloaded` set.
  void OnBlockOffloaded(BlockHash hash, std::optional<BlockHash> parent, std::span<const TokenId> tokens);
  void OnOffloadDropped(BlockHash hash);
  void AllCleared();

  bool empty() const { return events_.empty(); }
  // The events since the last call, in order.
  std::vector<KvEvent> Take();

 private:
  void Stored(BlockHash hash, std::optional<BlockHash> parent, std::span<const TokenId> tokens, bool offloaded);
  void Removed(BlockHash hash, bool offloaded);
  std::vector<KvEvent> events_;
};

}  // namespace ropeserve
