// The document splitter on real text (the GPL v3, tests/data/text) with
// word tokens and with a real tokenizer's tokens: token bounds, coverage,
// overlap, and cuts at paragraph/sentence boundaries.
#include "server/service/document_splitter.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "server/tokenizer/tokenizer.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::service {
namespace {

std::string ReadText() {
  std::ifstream in(std::string(ROPESERVE_TEST_DATA) + "/text/gpl-3.txt", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Word tokens the way byte-level BPE cuts them: a word with the spaces
// before it.
std::vector<TokenSpan> WordTokens(const std::string& text) {
  std::vector<TokenSpan> out;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t b = i;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    out.push_back({b, i});
  }
  return out;
}

// A real tokenizer's spans, code points turned into bytes.
std::vector<TokenSpan> TokenizerSpans(const std::string& text, const std::string& name) {
  auto t = tok::Tokenizer::FromPath(std::string(ROPESERVE_TEST_DATA) + "/tokenizers/" + name);
  EXPECT_TRUE(t.ok());
  auto e = (*t)->Encode(text, false);
  EXPECT_TRUE(e.ok());
  const std::vector<std::size_t> byte_of = tok::CodePointStarts(text);
  std::vector<TokenSpan> out;
  for (const auto& o : e->offsets) out.push_back({byte_of[o.start], byte_of[o.end]});
  return out;
}

void CheckInvariants(const std::string& text, const std::vector<TokenSpan>& tokens, const SplitOptions& o,
                     const std::vector<TextChunk>& chunks, int min_rank) {
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(chunks.front().first_token, 0u);
  EXPECT_EQ(chunks.back().last_token, tokens.size());
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    const TextChunk& c = chunks[k];
    SCOPED_TRACE("chunk " + std::to_string(k));
    EXPECT_LE(c.last_token - c.first_token, o.max_tokens);
    EXPECT_LT(c.first_token, c.last_token);
    // The text is the tokens' bytes, trimmed.
    ASSERT_LT(c.begin, c.end);
    EXPECT_GE(c.begin, tokens[c.first_token].begin);
    EXPECT_LE(c.end, tokens[c.last_token - 1].end);
    EXPECT_FALSE(std::isspace(static_cast<unsigned char>(text[c.begin])));
    EXPECT_FALSE(std::isspace(static_cast<unsigned char>(text[c.end - 1])));
    if (k + 1 == chunks.size()) continue;
    const TextChunk& next = chunks[k + 1];
    // Progress, no gap, bounded overlap.
    EXPECT_GT(next.first_token, c.first_token);
    EXPECT_LE(next.first_token, c.last_token);
    EXPECT_LE(c.last_token - next.first_token, std::min(o.overlap_tokens, o.max_tokens / 4));
    // Cut at a good boundary, in the second half of the budget.
    EXPECT_GE(BoundaryRank(text, tokens[c.last_token].begin), min_rank)
        << "...'" << text.substr(tokens[c.last_token].begin > 30 ? tokens[c.last_token].begin - 30 : 0, 30) << "' | '"
        << text.substr(tokens[c.last_token].begin, 30) << "'...";
    EXPECT_GE(c.last_token - c.first_token, o.max_tokens / 2);
    if (next.first_token < c.last_token) {
      EXPECT_GE(BoundaryRank(text, tokens[next.first_token].begin), 1);
    }
  }
}

TEST(BoundaryRank, Kinds) {
  EXPECT_EQ(BoundaryRank("One.\n\nTwo", 4), 4);  // before the blank line
  EXPECT_EQ(BoundaryRank("One.\n\nTwo", 6), 4);  // after it
  EXPECT_EQ(BoundaryRank("It ends. Next", 8), 3);
  EXPECT_EQ(BoundaryRank("It ends. Next", 9), 3);
  EXPECT_EQ(BoundaryRank("Really?! Yes", 8), 3);
  EXPECT_EQ(BoundaryRank("He said \"Stop.\" Then", 15), 3);  // through the closing quote
  EXPECT_EQ(BoundaryRank("(See below.) Then", 12), 3);
  EXPECT_EQ(BoundaryRank("pi is 3.14 here", 8), 0);  // not a sentence end: no space
  EXPECT_EQ(BoundaryRank("see example.com now", 12), 0);
  EXPECT_EQ(BoundaryRank("one line\nnext", 8), 2);
  EXPECT_EQ(BoundaryRank("two words", 3), 1);
  EXPECT_EQ(BoundaryRank("word", 2), 0);
  EXPECT_EQ(BoundaryRank("\xE4\xB8\xAD\xE6\x96\x87\xE3\x80\x82\xE4\xB8\x8B", 9), 3);  // 中文。下: CJK full stop
  EXPECT_EQ(BoundaryRank("x", 0), 4);
  EXPECT_EQ(BoundaryRank("x", 1), 4);
}

TEST(SplitDocument, RealTextWithWordTokens) {
  const std::string text = ReadText();
  ASSERT_GT(text.size(), 30000u);
  const auto tokens = WordTokens(text);
  for (SplitOptions o : {SplitOptions{200, 0}, SplitOptions{200, 40}, SplitOptions{500, 60}, SplitOptions{64, 100}}) {
    SCOPED_TRACE(std::to_string(o.max_tokens) + "/" + std::to_string(o.overlap_tokens));
    const auto chunks = SplitDocument(text, tokens, o);
    // The GPL's lines are wrapped: a line break is always in reach (a
    // sentence end not always: some run past 100 words).
    CheckInvariants(text, tokens, o, chunks, /*min_rank=*/2);
    EXPECT_GE(chunks.size(), tokens.size() / o.max_tokens);
  }
}

TEST(SplitDocument, RealTextWithTokenizerTokens) {
  const std::string text = ReadText();
  for (const char* name : {"qwen3", "llama2"}) {
    SCOPED_TRACE(name);
    const auto tokens = TokenizerSpans(text, name);
    ASSERT_GT(tokens.size(), 5000u);
    const SplitOptions o{512, 64};
    const auto chunks = SplitDocument(text, tokens, o);
    CheckInvariants(text, tokens, o, chunks, /*min_rank=*/3);
    // Most cuts are paragraph breaks when one lies in reach.
    int paragraphs = 0;
    for (std::size_t k = 0; k + 1 < chunks.size(); ++k)
      paragraphs += BoundaryRank(text, tokens[chunks[k].last_token].begin) == 4;
    EXPECT_GT(paragraphs, static_cast<int>(chunks.size()) / 2);
  }
}

TEST(SplitDocument, HardCutWithoutSpaces) {
  // One long "word": cuts between tokens, exactly max_tokens each.
  std::string text(1000, 'x');
  std::vector<TokenSpan> tokens;
  for (std::size_t i = 0; i < text.size(); i += 4) tokens.push_back({i, i + 4});
  const auto chunks = SplitDocument(text, tokens, {100, 20});
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].last_token, 100u);
  EXPECT_EQ(chunks[1].first_token, 100u);  // no boundary to overlap at
  EXPECT_EQ(chunks[2].last_token, 250u);
}

TEST(SplitDocument, SmallAndEmpty) {
  EXPECT_TRUE(SplitDocument("", {}, {10, 0}).empty());
  const std::string blank = "   \n\n  ";
  EXPECT_TRUE(SplitDocument(blank, {{0, blank.size()}}, {10, 0}).empty());
  const std::string one = "  Just one sentence.  ";
  const auto c = SplitDocument(one, WordTokens(one), {10, 2});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(one.substr(c[0].begin, c[0].end - c[0].begin), "Just one sentence.");
}

}  // namespace
}  // namespace ropeserve::service
