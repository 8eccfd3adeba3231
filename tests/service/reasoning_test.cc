#include "server/service/reasoning.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ropeserve::service {
namespace {

// Feeds `output` in pieces of `step` bytes and joins what comes out.
ReasoningSplitter::Split Streamed(std::string_view prompt, std::string_view output, std::size_t step) {
  ReasoningSplitter s(prompt);
  ReasoningSplitter::Split all;
  for (std::size_t i = 0; i < output.size(); i += step) {
    auto d = s.Push(output.substr(i, step));
    all.reasoning += d.reasoning;
    all.content += d.content;
  }
  auto d = s.Finish();
  all.reasoning += d.reasoning;
  all.content += d.content;
  return all;
}

TEST(Reasoning, TemplatesThatMentionBothTagsReason) {
  EXPECT_TRUE(ReasoningSplitter::ForTemplate("{{ '<think>\\n' }}...{{ '</think>' }}"));
  EXPECT_FALSE(ReasoningSplitter::ForTemplate("{{ messages[0].content }}"));
  EXPECT_FALSE(ReasoningSplitter::ForTemplate("<think> only"));
}

TEST(Reasoning, OutputThatOpensABlockIsSplitAtItsEnd) {
  auto s = ReasoningSplitter("<|im_start|>assistant\n").All("<think>\nhmm\n</think>\n\nThe answer.");
  EXPECT_EQ(s.reasoning, "\nhmm\n");
  EXPECT_EQ(s.content, "\n\nThe answer.");
}

TEST(Reasoning, PromptThatOpensTheBlockMakesTheOutputReasoningFirst) {
  auto s = ReasoningSplitter("<|im_start|>assistant\n<think>\n").All("hmm</think>Yes.");
  EXPECT_EQ(s.reasoning, "hmm");
  EXPECT_EQ(s.content, "Yes.");
}

TEST(Reasoning, ClosedBlockInThePromptMeansNoReasoning) {
  // Qwen3 with enable_thinking=false renders an empty block itself.
  auto s = ReasoningSplitter("assistant\n<think>\n\n</think>\n\n").All("Yes. </think> <think>");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "Yes. </think> <think>");
}

TEST(Reasoning, OutputWithoutTagsIsContent) {
  auto s = ReasoningSplitter("").All("Plain answer <think> later");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "Plain answer <think> later");
}

TEST(Reasoning, UnclosedBlockIsAllReasoning) {
  auto s = ReasoningSplitter("").All("<think>still thinking </thi");
  EXPECT_EQ(s.reasoning, "still thinking </thi");
  EXPECT_EQ(s.content, "");
}

TEST(Reasoning, AnOutputShorterThanTheTagIsContent) {
  EXPECT_EQ(ReasoningSplitter("").All("<thi").content, "<thi");
  EXPECT_EQ(ReasoningSplitter("").All("<").content, "<");
}

TEST(Reasoning, StreamingInAnyPiecesGivesTheSameSplit) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "<think>a < b </ c </think>d"},
      {"<think>", "x</thin</think></think>y"},
      {"", "<thinking>no</think>"},
      {"", "<think></think>"},
  };
  for (const auto& [prompt, output] : cases) {
    const auto whole = ReasoningSplitter(prompt).All(output);
    for (std::size_t step = 1; step <= output.size(); ++step) {
      const auto s = Streamed(prompt, output, step);
      EXPECT_EQ(s.reasoning, whole.reasoning) << output << " step " << step;
      EXPECT_EQ(s.content, whole.content) << output << " step " << step;
    }
  }
  EXPECT_EQ(ReasoningSplitter("<think>").All("x</thin</think></think>y").content, "</think>y");
}

TEST(Reasoning, StreamingHoldsBackOnlyWhatCouldBeATag) {
  ReasoningSplitter s("<think>");
  EXPECT_EQ(s.Push("abc</th").reasoning, "abc");
  auto d = s.Push("ink>de");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "de");
  EXPECT_EQ(s.Push("f").content, "f");
}

}  // namespace
}  // namespace ropeserve::service
