// Block pool bookkeeping with exact block ids: allocation order, LRU
// eviction of cached blocks, prefix matching, RAII release.
#include "server/engine/block_pool.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>

namespace ropeserve {
namespace {

using Ids = std::vector<BlockId>;

std::vector<TokenId> Tokens(int n, int start = 0) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Caches the full blocks of `tokens` held in `ids` (as the scheduler will
// once their K/V are written).
void CacheAll(BlockPool& pool, const Ids& ids, const std::vector<TokenId>& tokens) {
  std::optional<BlockHash> parent;
  std::optional<BlockRef> parent_ref;
  const int bs = pool.block_size();
  for (size_t i = 0; i < tokens.size() / bs; ++i) {
    std::span<const TokenId> chunk(tokens.data() + i * bs, bs);
    const BlockHash h = pool.Hash(parent, chunk);
    parent_ref = pool.CacheFullBlock(ids[i], h, chunk, parent, parent_ref);
    parent = h;
  }
}

TEST(BlockPool, AllocatesFromTheHeadAndFreedBlocksJoinTheTail) {
  BlockPool pool(10, 4);
  EXPECT_EQ(*pool.Allocate(3), (Ids{0, 1, 2}));
  EXPECT_EQ(*pool.Allocate(2), (Ids{3, 4}));
  EXPECT_EQ(pool.num_free(), 5);
  pool.Free(Ids{2, 1, 0});
  EXPECT_EQ(*pool.Allocate(6), (Ids{5, 6, 7, 8, 9, 2}));
  EXPECT_EQ(*pool.Allocate(2), (Ids{1, 0}));
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
}

TEST(BlockPool, NoRoomIsAValueAndChangesNothing) {
  BlockPool pool(4, 4);
  ASSERT_TRUE(pool.Allocate(3));
  EXPECT_FALSE(pool.Allocate(2).has_value());
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(*pool.Allocate(1), (Ids{3}));
}

TEST(BlockPool, PrefixHitReturnsTheCachedBlocksAfterTheyAreFreed) {
  BlockPool pool(10, 4);
  const auto prompt = Tokens(14);  // 3 full blocks + 2 tokens
  Ids ids = *pool.Allocate(4);
  CacheAll(pool, ids, prompt);
  pool.Free(Ids{ids.rbegin(), ids.rend()});

  auto [hit, hashes] = pool.MatchPrefix(prompt);
  EXPECT_EQ(hit, (Ids{0, 1, 2}));
  EXPECT_EQ(hashes.size(), 3u);
  EXPECT_EQ(pool.cache_hits(), 3u);
  pool.Touch(hit);
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.num_free(), 7);
  // A new request with the same prefix but a different third block shares two.
  auto other = Tokens(12);
  other[9] = 999;
  EXPECT_EQ(pool.MatchPrefix(other).first, (Ids{0, 1}));
  // Different first block: nothing, although later blocks are equal.
  other = Tokens(12);
  other[0] = 999;
  EXPECT_TRUE(pool.MatchPrefix(other).first.empty());
}

TEST(BlockPool, CachedBlocksAreEvictedLeastRecentlyFreedFirst) {
  BlockPool pool(6, 2);
  const auto a = Tokens(4, 0), b = Tokens(4, 100);
  Ids ia = *pool.Allocate(2), ib = *pool.Allocate(2);  // {0,1}, {2,3}
  CacheAll(pool, ia, a);
  CacheAll(pool, ib, b);
  pool.Free(Ids{1, 0});                          // queue: 4 5 1 0
  pool.Free(Ids{3, 2});                          // queue: 4 5 1 0 3 2
  EXPECT_EQ(*pool.Allocate(3), (Ids{4, 5, 1}));  // uncached first, then a's tail block
  EXPECT_EQ(pool.MatchPrefix(a).first, (Ids{0}));
  EXPECT_EQ(pool.MatchPrefix(b).first, (Ids{2, 3}));
  EXPECT_EQ(*pool.Allocate(1), (Ids{0}));
  EXPECT_TRUE(pool.MatchPrefix(a).first.empty());
}

TEST(BlockPool, EvictingAMiddleBlockEndsTheMatchThere) {
  BlockPool pool(4, 2);
  const auto t = Tokens(6);
  Ids ids = *pool.Allocate(3);
  CacheAll(pool, ids, t);
  pool.Free(Ids{1});  // only the middle block becomes free
  EXPECT_EQ(*pool.Allocate(2), (Ids{3, 1}));
  EXPECT_EQ(pool.MatchPrefix(t).first, (Ids{0}));
}

TEST(BlockPool, AHashCollisionNeverReturnsTheWrongBlock) {
  BlockPool pool(4, 2);
  Ids ids = *pool.Allocate(1);
  const std::vector<TokenId> x{1, 2}, y{3, 4};
  auto ref = pool.CacheFullBlock(ids[0], BlockHash{42}, x, std::nullopt, std::nullopt);
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->id, ids[0]);
  EXPECT_EQ(pool.FindCached(BlockHash{42}, x, std::nullopt, std::nullopt), ids[0]);
  EXPECT_FALSE(pool.FindCached(BlockHash{42}, y, std::nullopt, std::nullopt).has_value());
  EXPECT_FALSE(pool.FindCached(BlockHash{42}, x, BlockHash{7}, ref).has_value());
  // One block per hash value: colliding content stays uncached; the same
  // content again is the block that has it.
  Ids other = *pool.Allocate(1);
  EXPECT_FALSE(pool.CacheFullBlock(other[0], BlockHash{42}, y, std::nullopt, std::nullopt).has_value());
  EXPECT_EQ(pool.CacheFullBlock(other[0], BlockHash{42}, x, std::nullopt, std::nullopt), ref);
  EXPECT_EQ(pool.FindCached(BlockHash{42}, x, std::nullopt, std::nullopt), ids[0]);
  EXPECT_EQ(pool.CachedHashes(), (std::vector<std::uint64_t>{42}));
}

// A parent whose hash collides with another content's: the child cached
// after the first never continues the second, though the hashes chain the
// same (a client that can search the hash for collisions, as with a known
// seed, cannot read another prompt's K/V this way).
TEST(BlockPool, AChildIsReachedOnlyThroughTheParentItWasCachedAfter) {
  // Hashes that collide on purpose: a block's first token, chained.
  BlockHasher weak = [](std::optional<BlockHash> parent, std::span<const TokenId> tokens, std::uint64_t) {
    return BlockHash{(parent ? parent->value * 1000 : 0) + static_cast<std::uint64_t>(tokens[0])};
  };
  BlockPool pool(4, 2, weak);
  const std::vector<TokenId> secret{5, 6, 7, 8}, probe{5, 9, 7, 8};  // first blocks collide, second blocks equal
  Ids a = *pool.Allocate(2);
  CacheAll(pool, a, secret);
  ASSERT_EQ(pool.MatchPrefix(secret).first, (Ids{a[0], a[1]}));
  // The probe's first block collides with the secret's: no hit at all.
  EXPECT_TRUE(pool.MatchPrefix(probe).first.empty());
  // The secret's first block is evicted while its child stays cached, and
  // the probe's colliding block takes the hash.
  pool.Free(Ids{a[0]});
  Ids b = *pool.Allocate(2);  // 2, 3: the free ones first
  pool.Free(Ids{b[1], b[0]});
  Ids c = *pool.Allocate(3);  // reuses a[0] (evicting the secret's first block)
  ASSERT_EQ(pool.CachedHashes(), (std::vector<std::uint64_t>{5007}));
  CacheAll(pool, Ids{c[0], c[1]}, std::vector<TokenId>(probe.begin(), probe.begin() + 2));
  ASSERT_EQ(pool.CachedHashes(), (std::vector<std::uint64_t>{5, 5007}));
  // The probe matches its own first block, never the secret's child.
  EXPECT_EQ(pool.MatchPrefix(probe).first, (Ids{c[0]}));
  // And a child computed after the probe's block is not cached over it.
  EXPECT_FALSE(pool.CacheFullBlock(c[2], pool.Hash(BlockHash{5}, std::span<const TokenId>(probe).subspan(2)),
                                   std::span<const TokenId>(probe).subspan(2), BlockHash{5}, pool.RefOf(c[0]))
                   .has_value());
}

// A reference to a block's content goes stale when the block caches another.
TEST(BlockPool, AReferenceGoesStaleWhenItsBlockCachesAnotherContent) {
  BlockPool pool(2, 2);
  const auto t = Tokens(4);
  Ids ids = *pool.Allocate(1);
  CacheAll(pool, ids, std::vector<TokenId>(t.begin(), t.begin() + 2));
  const auto old_ref = pool.RefOf(ids[0]);
  ASSERT_TRUE(old_ref.has_value());
  pool.Free(ids);
  Ids again = *pool.Allocate(2);  // 1, then 0 (evicted)
  ASSERT_EQ(again[1], ids[0]);
  CacheAll(pool, Ids{again[1]}, std::vector<TokenId>(t.begin(), t.begin() + 2));
  EXPECT_NE(pool.RefOf(ids[0]), old_ref);
  const std::span<const TokenId> child(t.data() + 2, 2);
  const BlockHash parent = pool.Hash(std::nullopt, std::span<const TokenId>(t.data(), 2));
  EXPECT_FALSE(pool.CacheFullBlock(again[0], pool.Hash(parent, child), child, parent, old_ref).has_value());
  EXPECT_TRUE(pool.CacheFullBlock(again[0], pool.Hash(parent, child), child, parent, pool.RefOf(ids[0])).has_value());
}

// Records what the pool tells its listener.
struct Recorder : BlockPoolListener {
  std::vector<std::string> log;
  void OnBlockCached(BlockHash hash, std::optional<BlockHash> parent, std::span<const TokenId> tokens) override {
    log.push_back("cached " + std::to_string(hash.value) + " parent " +
                  (parent ? std::to_string(parent->value) : "none") + " tokens " + std::to_string(tokens.size()));
  }
  void OnBlockEvicted(BlockHash hash) override { log.push_back("evicted " + std::to_string(hash.value)); }
};

TEST(BlockPool, TellsItsListenerWhatItCachesAndEvictsAndItsHasherHashes) {
  // A hasher whose values are easy to read: 100 * (block number + 1).
  BlockHasher hasher = [](std::optional<BlockHash> parent, std::span<const TokenId>, std::uint64_t) {
    return BlockHash{parent ? parent->value + 100 : 100};
  };
  BlockPool pool(3, 2, hasher);
  Recorder rec;
  pool.SetListener(&rec);
  const auto t = Tokens(4);
  Ids ids = *pool.Allocate(2);
  std::optional<BlockHash> parent;
  std::optional<BlockRef> parent_ref;
  for (int i = 0; i < 2; ++i) {
    std::span<const TokenId> chunk(t.data() + 2 * i, 2);
    const BlockHash h = pool.Hash(parent, chunk);
    const auto ref = pool.CacheFullBlock(ids[i], h, chunk, parent, parent_ref);
    EXPECT_EQ(pool.CacheFullBlock(ids[i], h, chunk, parent, parent_ref), ref);  // again: no second event
    parent = h;
    parent_ref = ref;
  }
  EXPECT_EQ(pool.CachedHashes(), (std::vector<std::uint64_t>{100, 200}));
  EXPECT_EQ(pool.MatchPrefix(t).first, (Ids{0, 1}));
  pool.Free(Ids{1, 0});
  // Freed blocks keep their content; reusing them evicts it, the head first.
  EXPECT_EQ(*pool.Allocate(2), (Ids{2, 1}));
  EXPECT_EQ(rec.log, (std::vector<std::string>{"cached 100 parent none tokens 2", "cached 200 parent 100 tokens 2",
                                               "evicted 200"}));
  EXPECT_EQ(pool.CachedHashes(), (std::vector<std::uint64_t>{100}));
}

TEST(BlockPool, AllocationHandleReturnsItsBlocksLastFirst) {
  BlockPool pool(6, 4);
  {
    BlockAllocation a(&pool, *pool.Allocate(3));  // 0 1 2
    BlockAllocation moved = std::move(a);
    EXPECT_TRUE(a.ids().empty());
    EXPECT_EQ(pool.num_free(), 3);
  }
  EXPECT_EQ(pool.num_free(), 6);
  EXPECT_EQ(*pool.Allocate(6), (Ids{3, 4, 5, 2, 1, 0}));
}

TEST(BlockHash, ChainsOverTheParentAndExtraKey) {
  const auto t = Tokens(4);
  const BlockHash a = HashBlock(std::nullopt, t);
  EXPECT_EQ(a, HashBlock(std::nullopt, t));
  EXPECT_NE(a, HashBlock(BlockHash{a.value}, t));
  EXPECT_NE(a, HashBlock(std::nullopt, t, 1));
}

}  // namespace
}  // namespace ropeserve
