// The host KV tier: its LRU bookkeeping, and an engine whose evicted
// prefix comes back from the tier. The oracle is a fake model whose next
// token is a function of the K/V its sequence's blocks hold (the token
// written at each slot), with the mover copying those slots: a block
// copied back wrong, or into the wrong place, changes the output; outputs
// must equal an engine's that computes every prompt in full.
#include "server/engine/kv_offload.h"

#include <gtest/gtest.h>

#include <unordered_map>

#include "server/engine/engine.h"
#include "tests/engine/one_hot_logits.h"

namespace ropeserve {
namespace {

constexpr int kVocab = 50;
constexpr int kBlock = 4;

class KvTrackingModel : public testing::LogitsExecutor, public KvBlockMover {
 public:
  StatusOr<StepLogits> Forward(const StepPlan& plan) override {
    tables_.Apply(plan);
    for (const ScheduledSequence& s : plan.sequences) {
      const std::vector<BlockId>& table = tables_.Of(s.request_id);
      for (std::size_t j = 0; j < s.token_ids.size(); ++j) {
        const std::int64_t pos = s.start_position + static_cast<std::int64_t>(j);
        Slots(table.at(static_cast<std::size_t>(pos / kBlock)))[pos % kBlock] = s.token_ids[j];
      }
    }
    return testing::OneHotLogits(plan, kVocab, 20.0f, [this](const ScheduledSequence& s) {
      const std::vector<BlockId>& table = tables_.Of(s.request_id);
      std::uint64_t acc = 7;
      for (std::int64_t pos = 0; pos < s.context_length(); ++pos)
        acc = acc * 31 + static_cast<std::uint64_t>(Slots(table.at(pos / kBlock))[pos % kBlock] + 2);
      return static_cast<TokenId>(acc % kVocab);
    });
  }
  std::int64_t vocab_size() const override { return kVocab; }
  void SaveBlocks(std::span<const std::pair<BlockId, int>> moves) override {
    for (const auto& [block, slot] : moves) tier_[slot] = Slots(block);
    saves += static_cast<int>(moves.size());
  }
  void LoadBlocks(std::span<const std::pair<int, BlockId>> moves) override {
    for (const auto& [slot, block] : moves) {
      Slots(block) = tier_.at(slot);
      if (corrupt_loads) Slots(block)[1] += 1;
    }
    loads += static_cast<int>(moves.size());
  }
  int saves = 0, loads = 0;
  bool corrupt_loads = false;

 private:
  std::vector<TokenId>& Slots(BlockId b) {
    auto it = kv_.find(b);
    if (it == kv_.end()) it = kv_.emplace(b, std::vector<TokenId>(kBlock, -1)).first;
    return it->second;
  }
  BlockTables tables_;
  std::unordered_map<BlockId, std::vector<TokenId>> kv_;
  std::unordered_map<int, std::vector<TokenId>> tier_;
};

struct Answer {
  std::vector<TokenId> tokens;
  std::int64_t cached = 0;
};

Answer Ask(Engine& e, const std::vector<TokenId>& prompt) {
  EngineRequest r;
  r.prompt = prompt;
  r.max_tokens = 4;
  r.stop.ignore_eos = true;
  auto s = e.Submit(r);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  e.RunUntilIdle();
  Answer a;
  for (StreamChunk c; !c.finished;) {
    c = (*s)->Next(std::chrono::seconds(30));
    for (const auto& t : c.tokens) a.tokens.push_back(t.id);
    if (c.finished) a.cached = c.cached_tokens;
  }
  return a;
}

std::vector<TokenId> Tokens(int first, int n) {
  std::vector<TokenId> t;
  for (int i = 0; i < n; ++i) t.push_back((first + i * 7) % kVocab);
  return t;
}

EngineConfig Config(int offload_blocks, KvBlockMover* mover, bool prefix_caching = true) {
  EngineConfig c;
  c.num_blocks = 12;  // 48 token slots: one filler prompt evicts the document
  c.block_size = kBlock;
  c.scheduler.max_model_len = 44;
  c.scheduler.enable_prefix_caching = prefix_caching;
  c.kv_offload_blocks = offload_blocks;
  c.kv_offload_mover = mover;
  return c;
}

// Questions over one 20-token document, with prompts between them that
// evict it from the cache: with the tier the later questions find the
// document there (cached_tokens), and every answer is the answer of an
// engine that computes each prompt in full.
TEST(KvOffload, AnEvictedPrefixComesBackFromTheTierWithTheSameOutput) {
  KvTrackingModel tiered, full;
  Engine with_tier(Config(64, &tiered), tiered);
  Engine no_cache(Config(0, nullptr, /*prefix_caching=*/false), full);
  const std::vector<TokenId> doc = Tokens(3, 20);  // 5 full blocks
  for (int q = 0; q < 4; ++q) {
    std::vector<TokenId> question = doc;
    for (TokenId t : Tokens(30 + q, 5)) question.push_back(t);
    const int loads_before = tiered.loads;
    const Answer got = Ask(with_tier, question);
    EXPECT_EQ(got.tokens, Ask(no_cache, question).tokens) << "question " << q;
    if (q > 0) {
      // The whole document: what the filler left in the cache, the rest
      // from the tier.
      EXPECT_EQ(got.cached, 20) << "question " << q;
      EXPECT_GE(tiered.loads - loads_before, 3) << "question " << q;
    }
    // Other traffic: the document leaves the cache.
    const Answer filler = Ask(with_tier, Tokens(11 + q, 40));
    EXPECT_EQ(filler.tokens, Ask(no_cache, Tokens(11 + q, 40)).tokens);
  }
  EXPECT_GE(tiered.saves, 5);
  EXPECT_EQ(with_tier.stats().offload_loaded.load(), static_cast<std::uint64_t>(tiered.loads));
  auto contents = with_tier.CacheContents();
  ASSERT_TRUE(contents.ok());
  EXPECT_FALSE(contents->offloaded.empty());
}

// The oracle sees a wrong copy: a corrupted load changes the answer.
TEST(KvOffload, TheOracleSeesACorruptedCopy) {
  KvTrackingModel tiered, full;
  Engine with_tier(Config(64, &tiered), tiered);
  Engine no_cache(Config(0, nullptr, false), full);
  const std::vector<TokenId> doc = Tokens(3, 20);
  std::vector<TokenId> question = doc;
  question.push_back(9);
  Ask(with_tier, question);
  Ask(with_tier, Tokens(11, 40));  // evicts the document
  tiered.corrupt_loads = true;
  const Answer got = Ask(with_tier, question);
  EXPECT_EQ(got.cached, 20);
  EXPECT_NE(got.tokens, Ask(no_cache, question).tokens);
}

// Without the tier the evicted document is computed again.
TEST(KvOffload, WithoutTheTierTheDocumentIsRecomputed) {
  KvTrackingModel model;
  Engine e(Config(0, nullptr), model);
  const std::vector<TokenId> doc = Tokens(3, 20);
  std::vector<TokenId> question = doc;
  question.push_back(9);
  Ask(e, question);
  Ask(e, Tokens(11, 40));
  EXPECT_LE(Ask(e, question).cached, 4);  // at most the first block outlived the filler
  EXPECT_EQ(model.loads, 0);
}

TEST(KvOffloadTier, KeepsTheMostRecentAndNeverDropsAPinnedSlot) {
  KvOffloadTier tier(2);
  const std::vector<TokenId> a{1, 2}, b{3, 4}, c{5, 6};
  auto block = [](const std::vector<TokenId>& t, std::uint64_t key, std::optional<std::uint64_t> parent) {
    return EvictedBlock{BlockHash{key * 10}, std::nullopt, key, parent, t};
  };
  std::vector<BlockHash> dropped;
  const auto sa = tier.Store(block(a, 1, std::nullopt), &dropped);
  const auto sb = tier.Store(block(b, 2, 1), &dropped);
  ASSERT_TRUE(sa && sb);
  EXPECT_FALSE(tier.Store(block(a, 1, std::nullopt), &dropped).has_value());  // held: now the most recent
  EXPECT_EQ(tier.Find(2, b, 1), sb);                                          // b the most recent
  EXPECT_FALSE(tier.Find(2, b, 7).has_value());                               // another parent
  EXPECT_FALSE(tier.Find(2, a, 1).has_value());                               // other tokens
  tier.Pin(*sa);
  const auto sc = tier.Store(block(c, 3, 2), &dropped);  // a is pinned: b goes
  EXPECT_EQ(sc, sb);
  EXPECT_EQ(dropped, (std::vector<BlockHash>{{20}}));
  EXPECT_EQ(tier.Hashes(), (std::vector<std::uint64_t>{10, 30}));
  tier.Pin(*sc);
  EXPECT_FALSE(tier.Store(block(b, 2, 1), &dropped).has_value());  // every slot pinned
  tier.Unpin(*sa);
  tier.Unpin(*sc);
  EXPECT_TRUE(tier.Store(block(b, 2, 1), &dropped).has_value());
}

}  // namespace
}  // namespace ropeserve
