// Token masks and the grammar processor: the sorted-vocabulary walk
// against a brute-force check of every token, and random walks (random
// logits, so no model decides anything) that must end in a valid output
// within max_tokens.
#include "server/structured/grammar.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>

#include "server/tokenizer/tokenizer.h"

namespace ropeserve::structured {
namespace {

using nlohmann::json;

// All single bytes, some JSON-ish multi-byte pieces, two specials and EOS.
std::shared_ptr<const TokenVocabulary> SmallVocab(TokenId* eos_out) {
  std::vector<std::optional<std::string>> by_id;
  for (int b = 0; b < 256; ++b) by_id.push_back(std::string(1, static_cast<char>(b)));
  for (const char* piece :
       {"{\"",         "\":", "\",\"", "\"}", "true",  "false",    "null", "na",    "name", "age",  "12", "345",
        "\"name\":\"", ", ",  "}]",    "[{",  "\\u00", "\xC3\xA9", "\xC3", "abc\"", "\",",  "\"\"", "\"a"})
    by_id.push_back(std::string(piece));
  by_id.push_back(std::nullopt);  // a special token
  const TokenId eos = static_cast<TokenId>(by_id.size());
  by_id.push_back(std::nullopt);
  *eos_out = eos;
  // Logits rows are longer than the vocabulary (as with many models).
  return std::make_shared<const TokenVocabulary>(std::move(by_id), by_id.size() + 5, std::vector<TokenId>{eos});
}

// The slow reference: every token walked from `state` on its own.
bool BruteAllows(const CompiledGrammar& g, std::int32_t state, TokenId id, std::int32_t budget) {
  const auto& v = g.vocab();
  if (v.IsEos(id)) return g.Accepting(state);
  const auto& bytes = v.Bytes(id);
  if (!bytes || bytes->empty()) return false;
  const auto s = g.dfa().Walk(state, *bytes);
  if (s == Dfa::kDead) return false;
  return budget == CompiledGrammar::kNoBudget || g.Distance(s) <= budget;  // budget excludes the EOS
}

Constraint Schema(const std::string& s) { return {Constraint::Kind::kJsonSchema, s, {}, "response_format"}; }

const char* kPerson =
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},
        "tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3},"ok":{"type":"boolean"}},"required":["name","age"]})";

// Random walks: logits drawn at random, masked, argmax taken; the output
// must be in the language and end by EOS within max_tokens.
void RandomWalks(const Constraint& c, std::shared_ptr<const TokenVocabulary> vocab, int walks, std::int64_t max_tokens,
                 bool check_masks_against_brute_force) {
  auto g = CompiledGrammar::Compile(c, vocab);
  ASSERT_TRUE(g.ok()) << g.status().message();
  std::shared_ptr<const CompiledGrammar> grammar = std::move(*g);
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.f, 3.f);
  for (int w = 0; w < walks; ++w) {
    GrammarProcessor p(grammar, max_tokens);
    GrammarProcessor described(grammar, max_tokens);  // the same, stated as edits (what a device applies)
    std::vector<TokenId> generated;
    std::string text;
    std::int32_t state = grammar->start();
    bool ended = false;
    while (static_cast<std::int64_t>(generated.size()) < max_tokens) {
      std::vector<float> logits(vocab->logits_size());
      for (float& x : logits) x = normal(rng);
      const std::vector<float> raw = logits;
      p.Process(generated, logits);
      LogitsEdit edit;
      described.Describe(generated, edit);
      ASSERT_TRUE(edit.masked && edit.bias.empty());
      std::vector<float> edited = raw;
      edit.ApplyTo(edited);
      ASSERT_EQ(edited, logits) << "step " << generated.size();
      if (check_masks_against_brute_force) {
        const std::int64_t left =
            std::max<std::int64_t>(max_tokens - static_cast<std::int64_t>(generated.size()) - 2, -1);
        for (std::size_t id = 0; id < logits.size(); ++id) {
          const bool allowed = !std::isinf(logits[id]);
          ASSERT_EQ(allowed, BruteAllows(*grammar, state, static_cast<TokenId>(id), static_cast<std::int32_t>(left)))
              << "token " << id << " state " << state << " left " << left;
          if (allowed) {
            ASSERT_EQ(logits[id], raw[id]);  // masking never changes an allowed logit
          }
        }
      }
      const auto best = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      ASSERT_FALSE(std::isinf(logits[static_cast<std::size_t>(best)])) << "everything was masked";
      generated.push_back(best);
      if (vocab->IsEos(best)) {
        ended = true;
        break;
      }
      text += *vocab->Bytes(best);
      state = grammar->Advance(state, best);
      ASSERT_NE(state, Dfa::kDead) << text;
    }
    ASSERT_TRUE(ended) << "no EOS within " << max_tokens << " tokens: " << text;
    EXPECT_TRUE(grammar->dfa().Matches(text)) << text;
  }
}

TEST(Grammar, MasksEqualTheBruteForceWalkAndWalksEndValid) {
  TokenId eos;
  auto vocab = SmallVocab(&eos);
  RandomWalks(Schema(kPerson), vocab, 20, 120, /*check=*/true);
  RandomWalks({Constraint::Kind::kJsonObject, "", {}, ""}, vocab, 20, 80, true);
  RandomWalks({Constraint::Kind::kRegex, "(ab|c)+-[0-9]{2,4}", {}, ""}, vocab, 20, 30, true);
  RandomWalks({Constraint::Kind::kChoice, "", {"name", "nature", "\xC3\xA9t\xC3\xA9"}, ""}, vocab, 20, 10, true);
}

TEST(Grammar, BudgetForcesTheShortestCompletion) {
  TokenId eos;
  auto vocab = SmallVocab(&eos);
  auto g = CompiledGrammar::Compile(
      Schema(R"({"type":"object","properties":{"a":{"type":"string"}},"required":["a"]})"), vocab);
  ASSERT_TRUE(g.ok());
  // {"a":""} is 8 bytes: with max_tokens = 9 (8 + EOS) every walk is that.
  EXPECT_EQ((*g)->Distance((*g)->start()), 8);
  RandomWalks(Schema(R"({"type":"object","properties":{"a":{"type":"string"}},"required":["a"]})"), vocab, 10, 9, true);
}

TEST(Grammar, ProcessorFollowsARewind) {
  TokenId eos;
  auto vocab = SmallVocab(&eos);
  auto g = CompiledGrammar::Compile({Constraint::Kind::kChoice, "", {"ab", "cd"}, ""}, vocab);
  ASSERT_TRUE(g.ok());
  GrammarProcessor p(*g, 10);
  std::vector<float> logits(vocab->logits_size(), 0.f);
  std::vector<TokenId> gen = {'a'};
  p.Process(gen, logits);
  EXPECT_FALSE(std::isinf(logits['b']));
  EXPECT_TRUE(std::isinf(logits['d']));
  std::vector<TokenId> rewound;
  std::fill(logits.begin(), logits.end(), 0.f);
  p.Process(rewound, logits);  // shorter: replayed from the start
  EXPECT_FALSE(std::isinf(logits['a']));
  EXPECT_FALSE(std::isinf(logits['c']));
  EXPECT_TRUE(std::isinf(logits['b']));
}

// After a token its mask forbade (a host's sampler can pick one only from
// a row the mask did not reach), the grammar allows EOS alone, as an edit
// too.
TEST(Grammar, DescribeAfterAForbiddenTokenAllowsOnlyEos) {
  TokenId eos;
  auto vocab = SmallVocab(&eos);
  auto g = CompiledGrammar::Compile({Constraint::Kind::kChoice, "", {"ab", "cd"}, ""}, vocab);
  ASSERT_TRUE(g.ok());
  GrammarProcessor p(*g, 10), q(*g, 10);
  const std::vector<TokenId> gen = {'z'};
  std::vector<float> processed(vocab->logits_size(), 1.f), edited = processed;
  p.Process(gen, processed);
  LogitsEdit edit;
  q.Describe(gen, edit);
  ASSERT_TRUE(edit.masked && edit.allow_list);
  EXPECT_EQ(std::vector<TokenId>(edit.ids.begin(), edit.ids.end()), std::vector<TokenId>{eos});
  edit.ApplyTo(edited);
  EXPECT_EQ(edited, processed);
  EXPECT_FALSE(std::isinf(processed[static_cast<std::size_t>(eos)]));
  EXPECT_TRUE(std::isinf(processed['a']));
}

TEST(Grammar, CompileErrorsNameTheField) {
  TokenId eos;
  GrammarCompiler compiler(SmallVocab(&eos));
  auto bad = compiler.Get(Schema(R"({"type":"array","uniqueItems":true})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().param(), "response_format");
  EXPECT_NE(bad.status().message().find("uniqueItems"), std::string::npos);
  auto a = compiler.Get(Schema(kPerson));
  auto b = compiler.Get(Schema(kPerson));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());  // cached
}

TEST(Grammar, CompilerCacheKeepsTheMostRecent) {
  TokenId eos;
  GrammarCompiler compiler(SmallVocab(&eos), /*max_entries=*/2);
  auto choice = [](const char* s) { return Constraint{Constraint::Kind::kChoice, "", {s}, "guided_choice"}; };
  auto a = compiler.Get(choice("a"));
  auto b = compiler.Get(choice("b"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(compiler.Get(choice("a"))->get(), a->get());  // cached, and now the most recent
  ASSERT_TRUE(compiler.Get(choice("c")).ok());            // evicts b
  EXPECT_EQ(compiler.Get(choice("a"))->get(), a->get());
  EXPECT_NE(compiler.Get(choice("b"))->get(), b->get());  // compiled again
}

// The Qwen3 vocabulary (151k byte-level tokens): token bytes and a
// constrained random walk through the real vocabulary.
TEST(Grammar, RealByteLevelVocabulary) {
  auto t = tok::Tokenizer::FromPath(std::string(ROPESERVE_TEST_DATA) + "/tokenizers/qwen3");
  ASSERT_TRUE(t.ok()) << t.status().message();
  const auto hello = (*t)->TokenToId("\xC4\xA0hello");  // "Ġhello"
  ASSERT_TRUE(hello);
  EXPECT_EQ((*t)->TokenBytes(*hello), std::optional<std::string>(" hello"));
  const auto im_end = (*t)->TokenToId("<|im_end|>");
  ASSERT_TRUE(im_end);
  EXPECT_FALSE((*t)->TokenBytes(*im_end));
  auto vocab = TokenVocabulary::FromTokenizer(**t, 151936, {static_cast<TokenId>(*im_end)});
  EXPECT_EQ(vocab->single_bytes().count(), 256u);
  RandomWalks(Schema(kPerson), vocab, 3, 60, /*check=*/false);
}

TEST(Grammar, SentencePieceVocabularyBytes) {
  auto t = tok::Tokenizer::FromPath(std::string(ROPESERVE_TEST_DATA) + "/tokenizers/llama2");
  ASSERT_TRUE(t.ok()) << t.status().message();
  const auto word = (*t)->TokenToId("\xE2\x96\x81the");  // "▁the"
  const auto byte = (*t)->TokenToId("<0x7B>");
  ASSERT_TRUE(word && byte);
  EXPECT_EQ((*t)->TokenBytes(*word), std::optional<std::string>(" the"));
  EXPECT_EQ((*t)->TokenBytes(*byte), std::optional<std::string>("{"));
}

}  // namespace
}  // namespace ropeserve::structured
