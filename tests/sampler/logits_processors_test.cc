// The engine's logits processors and the edits that state them: an edit
// applied to a row equals the processor's own Process on it, which is what
// lets a device apply them (server/sampler/device_sampling.h).
#include "server/sampler/logits_processors.h"

#include <gtest/gtest.h>

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
