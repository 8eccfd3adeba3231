// The engine's logits processors and the edits that state them: an edit
// applied to a row equals the processor's own Process on it, which is what
// lets a device apply them (server/sampler/device_sampling.h).
#include "server/sampler/logits_processors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

#include "tests/engine/mask_processor.h"

namespace ropeserve {
namespace {

std::vector<float> RandomRow(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> row(n);
  for (float& x : row) x = normal(rng);
  return row;
}

using Mask = testing::MaskProcessor;

void ExpectEditEqualsProcess(LogitsProcessor& p, std::size_t vocab, std::uint64_t seed) {
  ASSERT_TRUE(p.Describable());
  const std::vector<float> raw = RandomRow(vocab, seed);
  std::vector<float> processed = raw, edited = raw;
  p.Process({}, processed);
  LogitsEdit edit;
  p.Describe({}, edit);
  edit.ApplyTo(edited);
  EXPECT_EQ(edited, processed);
  EXPECT_NE(processed, raw);  // the processor did something
}

TEST(LogitsEdit, BiasThenMaskAsTheProcessorsDoIt) {
  // Ids past the row are ignored by both (as a grammar's vocabulary can be
  // larger than a model's rows, or a mask list hold ids past them).
  LogitBias bias({{0, 2.5f}, {7, -100.f}, {63, 0.25f}, {64, 9.f}});
  ExpectEditEqualsProcess(bias, 64, 1);
  Mask allow(true, {1, 5, 6, 40, 63, 70}), forbid(false, {0, 2, 63, 99});
  ExpectEditEqualsProcess(allow, 64, 2);
  ExpectEditEqualsProcess(forbid, 64, 3);
  ProcessorChain chain({std::make_shared<LogitBias>(std::vector<std::pair<std::int64_t, float>>{{5, 3.f}, {9, 1.f}}),
                        std::make_shared<Mask>(true, std::vector<TokenId>{5, 6, 9, 12})});
  ExpectEditEqualsProcess(chain, 32, 4);
  ProcessorChain mask_first(
      {std::make_shared<Mask>(false, std::vector<TokenId>{3, 4}),
       std::make_shared<LogitBias>(std::vector<std::pair<std::int64_t, float>>{{3, 3.f}, {8, 1.f}})});
  ExpectEditEqualsProcess(mask_first, 32, 5);
}

TEST(LogitsEdit, AllowedTokensAndBadWordsAsEdits) {
  AllowedTokens allowed({40, 1, 5, 5, 63, 70});  // unsorted, a duplicate, one past the row
  ExpectEditEqualsProcess(allowed, 64, 6);
  std::vector<float> row = RandomRow(64, 7);
  allowed.Process({}, row);
  for (std::size_t i = 0; i < row.size(); ++i)
    EXPECT_EQ(std::isinf(row[i]), !(i == 1 || i == 5 || i == 40 || i == 63)) << i;

  // "7" alone; "3 4"; "1 2 3 9": what is banned depends on the output's tail.
  BadWords bad({{7}, {3, 4}, {1, 2, 3, 9}, {2, 3, 9}});
  EXPECT_EQ(bad.Banned(std::vector<TokenId>{}), (std::vector<TokenId>{7}));
  EXPECT_EQ(bad.Banned(std::vector<TokenId>{3}), (std::vector<TokenId>{4, 7}));
  EXPECT_EQ(bad.Banned(std::vector<TokenId>{3, 5}), (std::vector<TokenId>{7}));
  EXPECT_EQ(bad.Banned(std::vector<TokenId>{5, 1, 2, 3}), (std::vector<TokenId>{4, 7, 9}));
  EXPECT_EQ(bad.Banned(std::vector<TokenId>{2, 3}), (std::vector<TokenId>{4, 7, 9}));
  EXPECT_EQ(bad.Banned(std::vector<TokenId>{3, 2}), (std::vector<TokenId>{7}));
  for (const std::vector<TokenId>& generated :
       {std::vector<TokenId>{}, std::vector<TokenId>{3}, std::vector<TokenId>{0, 1, 2, 3}}) {
    std::vector<float> processed = RandomRow(16, 8), edited = processed;
    bad.Process(generated, processed);
    LogitsEdit edit;
    bad.Describe(generated, edit);
    edit.ApplyTo(edited);
    EXPECT_EQ(edited, processed);
    for (TokenId id : bad.Banned(generated)) EXPECT_TRUE(std::isinf(processed[static_cast<std::size_t>(id)]));
  }
  BadWords none({{1, 2}});
  LogitsEdit edit;
  none.Describe(std::vector<TokenId>{5}, edit);
  EXPECT_FALSE(edit.masked);  // nothing to ban after this output
  // A bias and one of them make one edit.
  ProcessorChain chain({std::make_shared<LogitBias>(std::vector<std::pair<std::int64_t, float>>{{5, 3.f}}),
                        std::make_shared<AllowedTokens>(std::vector<TokenId>{5, 6})});
  ExpectEditEqualsProcess(chain, 32, 9);
}

TEST(LogitsEdit, WhatCannotBeOneEditStaysOnTheHost) {
  // One id twice ("7" and "07" in a request): the host adds both in order.
  EXPECT_FALSE(LogitBias({{7, 1.f}, {7, 2.f}}).Describable());
  EXPECT_FALSE(LogitBias({{-1, 1.f}}).Describable());
  EXPECT_TRUE(LogitBias({{7, 1.f}, {8, 2.f}}).Describable());
  auto bias = [] { return std::make_shared<LogitBias>(std::vector<std::pair<std::int64_t, float>>{{1, 1.f}}); };
  auto mask = [] { return std::make_shared<Mask>(true, std::vector<TokenId>{1}); };
  EXPECT_FALSE(ProcessorChain({bias(), bias()}).Describable());  // ids of two biases may meet
  EXPECT_FALSE(ProcessorChain({mask(), mask()}).Describable());  // two masks intersect
  EXPECT_TRUE(ProcessorChain({bias(), mask()}).Describable());
  class Opaque : public LogitsProcessor {
   public:
    void Process(std::span<const TokenId>, std::span<float>) override {}
  };
  EXPECT_FALSE(ProcessorChain({bias(), std::make_shared<Opaque>()}).Describable());
}

}  // namespace
}  // namespace ropeserve
