// KV cache events from the engine (no transport): how the recorder groups a
// pool's changes, and that the batches an engine hands its sink, replayed
// in order, give exactly the hashes its prefix cache holds, through
// evictions, with a threaded engine too.
#include "server/engine/kv_events.h"

#include <gtest/gtest.h>

#include <mutex>
#include <set>

#include "server/engine/engine.h"
#include "tests/engine/one_hot_logits.h"

namespace ropeserve {
namespace {

TEST(KvEventRecorder, GroupsAChainIntoOneStoredEventAndRemovalsInARow) {
  KvEventRecorder rec;
  const std::vector<TokenId> a{1, 2}, b{3, 4}, c{5, 6};
  rec.OnBlockCached(BlockHash{10}, std::nullopt, a);
  rec.OnBlockCached(BlockHash{11}, BlockHash{10}, b);  // continues the chain
  rec.OnBlockCached(BlockHash{20}, BlockHash{7}, c);   // another chain
  rec.OnBlockEvicted(BlockHash{10});
  rec.OnBlockEvicted(BlockHash{11});
  rec.OnBlockCached(BlockHash{21}, BlockHash{20}, a);  // after a removal: a new event
  auto events = rec.Take();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].kind, KvEvent::Kind::kBlockStored);
  EXPECT_EQ(events[0].block_hashes, (std::vector<BlockHash>{{10}, {11}}));
  EXPECT_FALSE(events[0].parent.has_value());
  EXPECT_EQ(events[0].token_ids, (std::vector<TokenId>{1, 2, 3, 4}));
  EXPECT_EQ(events[1].block_hashes, (std::vector<BlockHash>{{20}}));
  EXPECT_EQ(events[1].parent, BlockHash{7});
  EXPECT_EQ(events[2].kind, KvEvent::Kind::kBlockRemoved);
  EXPECT_EQ(events[2].block_hashes, (std::vector<BlockHash>{{10}, {11}}));
  EXPECT_EQ(events[3].kind, KvEvent::Kind::kBlockStored);
  EXPECT_EQ(events[3].parent, BlockHash{20});
  EXPECT_TRUE(rec.empty());
  rec.OnBlockEvicted(BlockHash{1});
  rec.AllCleared();  // what came before a clear is dropped
  events = rec.Take();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KvEvent::Kind::kAllBlocksCleared);
}

// The host tier's changes are events of their own: never merged with the
// cache's, even along one chain.
TEST(KvEventRecorder, KeepsTheTiersEventsApartFromTheCaches) {
  KvEventRecorder rec;
  const std::vector<TokenId> a{1, 2}, b{3, 4};
  rec.OnBlockCached(BlockHash{10}, std::nullopt, a);
  rec.OnBlockOffloaded(BlockHash{11}, BlockHash{10}, b);  // continues the chain, in the tier
  rec.OnBlockEvicted(BlockHash{10});
  rec.OnOffloadDropped(BlockHash{11});
  rec.OnOffloadDropped(BlockHash{12});
  const auto events = rec.Take();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_FALSE(events[0].offloaded);
  EXPECT_TRUE(events[1].offloaded);
  EXPECT_EQ(events[1].block_hashes, (std::vector<BlockHash>{{11}}));
  EXPECT_EQ(events[2].kind, KvEvent::Kind::kBlockRemoved);
  EXPECT_FALSE(events[2].offloaded);
  EXPECT_TRUE(events[3].offloaded);
  EXPECT_EQ(events[3].block_hashes, (std::vector<BlockHash>{{11}, {12}}));
}

// A subscriber's view: the batches replayed into a set of hashes.
class ReplayingSink : public KvEventSink {
 public:
  void Publish(KvEventBatch batch) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++batches_;
    for (const KvEvent& e : batch.events) {
      switch (e.kind) {
        case KvEvent::Kind::kBlockStored:
          for (BlockHash h : e.block_hashes) EXPECT_TRUE(cached_.insert(h.value).second) << "stored twice";
          EXPECT_EQ(e.token_ids.size(), e.block_hashes.size() * 4);
          break;
        case KvEvent::Kind::kBlockRemoved:
          for (BlockHash h : e.block_hashes) EXPECT_EQ(cached_.erase(h.value), 1u) << "removed, never stored";
          ++removals_;
          break;
        case KvEvent::Kind::kAllBlocksCleared:
          cached_.clear();
          ++clears_;
          break;
      }
    }
  }
  std::vector<std::uint64_t> Cached() {
    std::lock_guard<std::mutex> lock(mu_);
    return {cached_.begin(), cached_.end()};  // std::set: ascending
  }
  int batches() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }
  int removals() {
    std::lock_guard<std::mutex> lock(mu_);
    return removals_;
  }
  int clears() {
    std::lock_guard<std::mutex> lock(mu_);
    return clears_;
  }

 private:
  std::mutex mu_;
  std::set<std::uint64_t> cached_;
  int batches_ = 0, removals_ = 0, clears_ = 0;
};

// Next token: (last + 1) % vocab.
class CountingModel : public testing::LogitsExecutor {
 public:
  StatusOr<StepLogits> Forward(const StepPlan& plan) override {
    return testing::OneHotLogits(plan, 50, 20.0f, [](const auto& s) { return (s.token_ids.back() + 1) % 50; });
  }
  std::int64_t vocab_size() const override { return 50; }
};

std::vector<TokenId> Prompt(TokenId first, int n) {
  std::vector<TokenId> p;
  for (int i = 0; i < n; ++i) p.push_back((first + i * 7) % 50);
  return p;
}

void ExpectEventsReproduceTheCache(bool threaded) {
  CountingModel model;
  ReplayingSink sink;
  EngineConfig c;
  c.num_blocks = 12;  // 48 tokens: the prompts below overflow it
  c.block_size = 4;
  c.scheduler.max_model_len = 40;
  c.kv_events = &sink;
  Engine e(c, model);
  EXPECT_EQ(sink.clears(), 1);  // a new engine says its cache is empty
  if (threaded) e.Start();
  // Prompts sharing a 16-token prefix, then others that evict it.
  std::vector<std::vector<TokenId>> prompts;
  const auto shared = Prompt(1, 16);
  for (int i = 0; i < 3; ++i) {
    auto p = shared;
    for (TokenId t : Prompt(10 + i, 6)) p.push_back(t);
    prompts.push_back(p);
  }
  for (int i = 0; i < 4; ++i) prompts.push_back(Prompt(20 + i, 21));
  for (const auto& p : prompts) {
    EngineRequest r;
    r.prompt = p;
    r.max_tokens = 5;
    r.stop.ignore_eos = true;
    auto s = e.Submit(r);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    if (!threaded) e.RunUntilIdle();
    for (StreamChunk chunk; !chunk.finished;) chunk = (*s)->Next(std::chrono::seconds(30));
    auto hashes = e.CachedBlockHashes();
    ASSERT_TRUE(hashes.ok());
    EXPECT_EQ(*hashes, sink.Cached());
  }
  EXPECT_GT(sink.removals(), 0);  // the pool overflowed: evictions were told
  EXPECT_FALSE(sink.Cached().empty());
  EXPECT_GT(e.stats().prefix_hits.load(), 0u);  // the shared prefix was hit
  e.Stop();
  if (threaded) {
    EXPECT_FALSE(e.CachedBlockHashes().ok());  // Unavailable, never a wait
  }
}

TEST(EngineKvEvents, ReplayedBatchesReproduceThePrefixCache) { ExpectEventsReproduceTheCache(false); }

TEST(EngineKvEvents, ReplayedBatchesReproduceThePrefixCacheOnTheEngineThread) { ExpectEventsReproduceTheCache(true); }

TEST(EngineKvEvents, NoSinkNoEvents) {
  CountingModel model;
  EngineConfig c;
  c.num_blocks = 8;
  c.block_size = 4;
  c.scheduler.max_model_len = 32;
  Engine e(c, model);
  EngineRequest r;
  r.prompt = Prompt(1, 9);
  r.max_tokens = 2;
  auto s = e.Submit(r);
  ASSERT_TRUE(s.ok());
  e.RunUntilIdle();
  auto hashes = e.CachedBlockHashes();
  ASSERT_TRUE(hashes.ok());
  EXPECT_EQ(hashes->size(), 2u);  // the cache works without a sink
}

}  // namespace
}  // namespace ropeserve
