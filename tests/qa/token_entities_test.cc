// Entity grouping against transformers' own expectations: the Aggregate
// cases are the inputs and expected outputs of transformers'
// tests/pipelines/test_pipelines_token_classification.py
// (test_aggregation_strategy, _example2, _no_b_i_prefix: pre-entities fed
// to TokenClassificationPipeline.aggregate; expected scores there are
// rounded to 3 decimals, or exact where the arithmetic is: a mean of three
// doubles is within 4 ulp). GatherTokens runs the synthetic WordPiece and
// byte-level BPE tokenizers of tests/data/tokenizers/synthetic on texts
// whose tokens are listed in the test, with the rules of
// gather_pre_entities spelled out beside each expectation.
#include "server/qa/token_entities.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace ropeserve::qa {
namespace {

std::shared_ptr<const tok::Tokenizer> Load(const std::string& name, const std::string& config = "") {
  std::ifstream in(std::string(ROPESERVE_TEST_DATA) + "/tokenizers/synthetic/" + name + "/tokenizer.json");
  std::stringstream ss;
  ss << in.rdbuf();
  auto t = tok::Tokenizer::FromJson(ss.str(), config);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : nullptr;
}

const std::vector<std::string> kConll = {"O", "B-MISC", "I-MISC", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"};

TokenScores Pre(std::vector<double> scores, std::int64_t index, bool is_subword, std::string word, std::int64_t start,
                std::int64_t end) {
  return {std::move(word), std::move(scores), start, end, index, is_subword};
}

// test_aggregation_strategy: "En" "##zo" (I-PER) and "UN" (B-ORG).
std::vector<TokenScores> Enzo(std::size_t labels) {
  std::vector<double> per(labels, 0), per2(labels, 0), org(labels, 0);
  per[4] = 0.9968166351318359;
  per2[4] = 0.9957635998725891;
  org[5] = 0.9986497163772583;
  return {Pre(per, 1, false, "En", 0, 2), Pre(per2, 2, true, "##zo", 2, 4), Pre(org, 7, false, "UN", 11, 13)};
}

void ExpectEntity(const Entity& e, const std::string& label, double score, double tol, const std::string& word,
                  std::int64_t start, std::int64_t end) {
  EXPECT_EQ(e.label, label);
  EXPECT_NEAR(e.score, score, tol) << label << " " << word;
  EXPECT_EQ(e.word, word);
  EXPECT_EQ(e.start, start);
  EXPECT_EQ(e.end, end);
}

constexpr double kRounded = 5e-4;  // nested_simplify's 3 decimals

TEST(TokenEntities, AggregationStrategiesAsTransformersTests) {
  auto bert = Load("bert");
  ASSERT_TRUE(bert);
  const auto tokens = Enzo(kConll.size());
  auto none = Aggregate(tokens, kConll, *bert, Aggregation::kNone, {});
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  ASSERT_EQ(none->size(), 3u);
  ExpectEntity((*none)[0], "I-PER", 0.997, kRounded, "En", 0, 2);
  ExpectEntity((*none)[1], "I-PER", 0.996, kRounded, "##zo", 2, 4);
  ExpectEntity((*none)[2], "B-ORG", 0.999, kRounded, "UN", 11, 13);
  EXPECT_EQ((*none)[2].index, 7);
  struct Case {
    Aggregation a;
    double per;
  };
  for (const Case& c : {Case{Aggregation::kSimple, 0.996}, Case{Aggregation::kFirst, 0.997},
                        Case{Aggregation::kMax, 0.997}, Case{Aggregation::kAverage, 0.996}}) {
    auto got = Aggregate(tokens, kConll, *bert, c.a, {});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), 2u) << AggregationName(c.a);
    ExpectEntity((*got)[0], "PER", c.per, kRounded, "Enzo", 0, 4);
    ExpectEntity((*got)[1], "ORG", 0.999, kRounded, "UN", 11, 13);
  }
}

TEST(TokenEntities, WordAggregationDisagreeingSubwords) {
  // test_aggregation_strategy_example2: "Ra" "##ma" "##zotti" of one word
  // whose tokens disagree (the ninth score is dropped: the model has 9
  // labels, transformers' arrays carry a tenth zero).
  auto bert = Load("bert");
  ASSERT_TRUE(bert);
  std::vector<TokenScores> t = {
      Pre({0, 0.55, 0, 0.45, 0, 0, 0, 0, 0}, 1, false, "Ra", 0, 2),
      Pre({0, 0, 0, 0.2, 0, 0, 0, 0.8, 0}, 2, true, "##ma", 2, 4),
      Pre({0, 0, 0, 0.4, 0, 0, 0.6, 0, 0}, 3, true, "##zotti", 11, 13),
  };
  auto none = Aggregate(t, kConll, *bert, Aggregation::kNone, {});
  ASSERT_TRUE(none.ok());
  ASSERT_EQ(none->size(), 3u);
  ExpectEntity((*none)[0], "B-MISC", 0.55, 0, "Ra", 0, 2);
  ExpectEntity((*none)[1], "B-LOC", 0.8, 0, "##ma", 2, 4);
  ExpectEntity((*none)[2], "I-ORG", 0.6, 0, "##zotti", 11, 13);
  const double ulp4 = 4 * std::numeric_limits<double>::epsilon();
  auto first = Aggregate(t, kConll, *bert, Aggregation::kFirst, {});
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 1u);
  ExpectEntity((*first)[0], "MISC", 0.55, 0, "Ramazotti", 0, 13);
  auto max = Aggregate(t, kConll, *bert, Aggregation::kMax, {});
  ASSERT_TRUE(max.ok());
  ASSERT_EQ(max->size(), 1u);
  ExpectEntity((*max)[0], "LOC", 0.8, 0, "Ramazotti", 0, 13);
  // B-PER's mean (0.45 + 0.2 + 0.4) / 3 is the highest, though no token's best.
  auto average = Aggregate(t, kConll, *bert, Aggregation::kAverage, {});
  ASSERT_TRUE(average.ok());
  ASSERT_EQ(average->size(), 1u);
  ExpectEntity((*average)[0], "PER", 0.35, ulp4, "Ramazotti", 0, 13);
}

TEST(TokenEntities, LabelsWithoutBIPrefixesAndIgnoreLabels) {
  // test_aggregation_strategy_no_b_i_prefix: plain labels continue each other.
  auto bert = Load("bert");
  ASSERT_TRUE(bert);
  const std::vector<std::string> plain = {"O", "MISC", "PER", "ORG", "LOC"};
  std::vector<TokenScores> t = {Pre({0, 0, 0, 0, 0.9968166351318359}, 1, false, "En", 0, 2),
                                Pre({0, 0, 0, 0, 0.9957635998725891}, 2, true, "##zo", 2, 4),
                                Pre({0, 0, 0, 0.9986497163772583, 0}, 7, false, "UN", 11, 13)};
  auto none = Aggregate(t, plain, *bert, Aggregation::kNone, {});
  ASSERT_TRUE(none.ok());
  ASSERT_EQ(none->size(), 3u);
  ExpectEntity((*none)[0], "LOC", 0.997, kRounded, "En", 0, 2);
  auto simple = Aggregate(t, plain, *bert, Aggregation::kSimple, {});
  ASSERT_TRUE(simple.ok());
  ASSERT_EQ(simple->size(), 2u);
  ExpectEntity((*simple)[0], "LOC", 0.996, kRounded, "Enzo", 0, 4);
  ExpectEntity((*simple)[1], "ORG", 0.999, kRounded, "UN", 11, 13);
  // ignore_labels drops by the group's name (grouped) or the label (none).
  auto no_loc = Aggregate(t, plain, *bert, Aggregation::kSimple, {"LOC"});
  ASSERT_TRUE(no_loc.ok());
  ASSERT_EQ(no_loc->size(), 1u);
  EXPECT_EQ((*no_loc)[0].label, "ORG");
  auto none_no_org = Aggregate(t, plain, *bert, Aggregation::kNone, {"ORG"});
  ASSERT_TRUE(none_no_org.ok());
  EXPECT_EQ(none_no_org->size(), 2u);
}

TEST(TokenEntities, BeginTagsSplitGroups) {
  // B- starts a group even after the same tag; I- after another tag starts
  // one too; a group is named by its first label's part after the last '-'.
  auto bert = Load("bert");
  ASSERT_TRUE(bert);
  const std::vector<std::string> labels = {"O", "B-PER", "I-PER", "I-LOC"};
  std::vector<TokenScores> t = {
      Pre({0, 1, 0, 0}, 1, false, "ann", 0, 3),   Pre({0, 0, 1, 0}, 2, false, "lee", 4, 7),
      Pre({0, 1, 0, 0}, 3, false, "bob", 8, 11),  Pre({0, 0, 0, 1}, 4, false, "paris", 12, 17),
      Pre({1, 0, 0, 0}, 5, false, "and", 18, 21), Pre({0, 0, 1, 0}, 6, false, "kim", 22, 25)};
  auto got = Aggregate(t, labels, *bert, Aggregation::kSimple, {"O"});
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 4u);
  ExpectEntity((*got)[0], "PER", 1, 0, "ann lee", 0, 7);
  ExpectEntity((*got)[1], "PER", 1, 0, "bob", 8, 11);
  ExpectEntity((*got)[2], "LOC", 1, 0, "paris", 12, 17);
  ExpectEntity((*got)[3], "PER", 1, 0, "kim", 22, 25);
}

// Logits of a token whose softmax puts `p` on `label` and the rest evenly
// on the others (labels > 1).
std::vector<float> Row(std::size_t labels, std::size_t label, double p) {
  std::vector<float> row(labels, 0.0f);
  row[label] = static_cast<float>(std::log(p * static_cast<double>(labels - 1) / (1 - p)));
  return row;
}

TEST(TokenEntities, GatherTokensWordPiece) {
  // The WordPiece tokenizer marks continuations ("##"): a token continues a
  // word when its string is longer than the text it covers.
  auto bert = Load("bert", R"({"unk_token": "[UNK]"})");
  ASSERT_TRUE(bert);
  const std::string text = "Ramazotti and ✓ paris";
  auto enc = bert->Encode(text, true);
  ASSERT_TRUE(enc.ok());
  const std::size_t n = enc->size(), labels = kConll.size();
  std::vector<float> logits;
  for (std::size_t i = 0; i < n; ++i) {
    auto row = Row(labels, i % labels, 0.7);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  auto got = GatherTokens({text, *enc, logits, kConll}, *bert);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), n - 2);  // [CLS] and [SEP] left out
  const auto cps = [&](std::int64_t s, std::int64_t e) { return text.substr(s, e - s); };
  for (const TokenScores& t : *got) {
    const std::size_t i = static_cast<std::size_t>(t.index);
    EXPECT_EQ(t.start, static_cast<std::int64_t>(enc->offsets[i].start));
    double sum = 0;
    for (double p : t.scores) sum += p;
    EXPECT_NEAR(sum, 1, 16 * std::numeric_limits<double>::epsilon());
    // float logits: log(0.7 * 8 / 0.3) rounded to float moves p by < 1e-7.
    EXPECT_NEAR(t.scores[i % labels], 0.7, 1e-6);
    if (enc->ids[i] == *bert->UnkId()) {
      // The unknown token ("✓") is its text, and starts a word.
      EXPECT_EQ(t.word, "✓");
      EXPECT_FALSE(t.is_subword);
    } else {
      EXPECT_EQ(t.word, enc->tokens[i]);
      EXPECT_EQ(t.is_subword, t.word.rfind("##", 0) == 0) << t.word;
      if (t.end <= 14) {  // ASCII before the ✓; the normalizer lowercases
        std::string ref = cps(t.start, t.end);
        for (char& c : ref) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        EXPECT_EQ(t.word.substr(t.is_subword ? 2 : 0), ref);
      }
    }
  }
  bool unk = false, sub = false;
  for (const TokenScores& t : *got) {
    unk |= t.word == "✓";
    sub |= t.is_subword;
  }
  EXPECT_TRUE(unk) << "the text should hold an unknown character";
  EXPECT_TRUE(sub) << "\"ramazotti\" should be more than one WordPiece token";
  // Every token B-PER: "first" makes one entity per word (a B- starts a
  // group), spelled by the decoder from the word's pieces.
  std::vector<float> per;
  for (std::size_t i = 0; i < n; ++i) {
    auto row = Row(labels, 3, 0.7);
    per.insert(per.end(), row.begin(), row.end());
  }
  auto tokens = GatherTokens({text, *enc, per, kConll}, *bert);
  ASSERT_TRUE(tokens.ok());
  auto words = Aggregate(*tokens, kConll, *bert, Aggregation::kFirst, {});
  ASSERT_TRUE(words.ok());
  ASSERT_EQ(words->size(), 4u);
  ExpectEntity((*words)[0], "PER", 0.7, 1e-6, "ramazotti", 0, 9);
  ExpectEntity((*words)[1], "PER", 0.7, 1e-6, "and", 10, 13);
  ExpectEntity((*words)[2], "PER", 0.7, 1e-6, "✓", 14, 15);
  ExpectEntity((*words)[3], "PER", 0.7, 1e-6, "paris", 16, 21);
}

TEST(TokenEntities, GatherTokensByteLevelFallback) {
  // A BPE without a continuation prefix: the fallback rule (no space before
  // the token nor at its start) decides words; offsets are trimmed of the
  // space, the word keeps its "Ġ" until the decoder spells it (" schiphol.").
  auto roberta = Load("roberta");
  ASSERT_TRUE(roberta);
  // (This vocabulary has "Ġs" but not "ĠS": an upper-case word would start
  // with a lone "Ġ", a word of its own by the pipeline's rule.)
  const std::string text = "Groenlinks praat over schiphol.";
  auto enc = roberta->Encode(text, true);
  ASSERT_TRUE(enc.ok());
  const std::size_t n = enc->size(), labels = kConll.size();
  // Every token of "Groenlinks" B-ORG (then I-ORG), "schiphol." B-LOC / I-LOC, others O.
  std::vector<float> logits;
  for (std::size_t i = 0; i < n; ++i) {
    const auto start = enc->offsets[i].start;
    const bool first_piece = i > 0 && (start == 0 || text[start - 1] == ' ');
    std::size_t label = 0;
    if (!enc->special_tokens_mask[i] && start < 10) label = first_piece ? 5 : 6;
    if (!enc->special_tokens_mask[i] && start >= 22) label = first_piece ? 7 : 8;
    auto row = Row(labels, label, 0.9);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  auto got = GatherTokens({text, *enc, logits, kConll}, *roberta);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (const TokenScores& t : *got) {
    const bool after_space = t.start == 0 || text[t.start - 1] == ' ';
    EXPECT_EQ(t.is_subword, !after_space) << t.word;
  }
  for (Aggregation a : {Aggregation::kSimple, Aggregation::kFirst, Aggregation::kMax, Aggregation::kAverage}) {
    auto e = Aggregate(*got, kConll, *roberta, a, {"O"});
    ASSERT_TRUE(e.ok());
    std::string all;
    for (const TokenScores& t : *got) all += " " + t.word + "@" + std::to_string(t.start);
    ASSERT_EQ(e->size(), 2u) << AggregationName(a) << all;
    // average: a word's label is its best mean, I- (B- on its first token
    // only): 7 tokens of "Groenlinks", 6 of "schiphol.", 0.9 or 1/80 each.
    const bool avg = a == Aggregation::kAverage;
    const double org = avg ? (6 * 0.9 + 0.0125) / 7 : 0.9, loc = avg ? (5 * 0.9 + 0.0125) / 6 : 0.9;
    ASSERT_EQ((*got)[0].word, "G");
    ExpectEntity((*e)[0], "ORG", org, 1e-6, "Groenlinks", 0, 10);  // the pre-tokenizer adds no prefix space
    ExpectEntity((*e)[1], "LOC", loc, 1e-6, " schiphol.", 22, 31);
  }
}

TEST(TokenEntities, ParseAggregation) {
  EXPECT_EQ(ParseAggregation("SIMPLE"), Aggregation::kSimple);
  EXPECT_EQ(ParseAggregation("average"), Aggregation::kAverage);
  EXPECT_EQ(ParseAggregation("mean"), std::nullopt);
  for (Aggregation a :
       {Aggregation::kNone, Aggregation::kSimple, Aggregation::kFirst, Aggregation::kMax, Aggregation::kAverage})
    EXPECT_EQ(ParseAggregation(AggregationName(a)), a);
}

TEST(TokenEntities, MismatchedLogitsAreAnError) {
  auto bert = Load("bert");
  ASSERT_TRUE(bert);
  const std::string text = "paris";
  auto enc = bert->Encode(text, true);
  ASSERT_TRUE(enc.ok());
  std::vector<float> short_logits(kConll.size());
  EXPECT_FALSE(GatherTokens({text, *enc, short_logits, kConll}, *bert).ok());
  std::vector<TokenScores> t = {Pre({1, 0}, 1, false, "x", 0, 1)};
  EXPECT_FALSE(Aggregate(t, kConll, *bert, Aggregation::kSimple, {}).ok());
}

}  // namespace
}  // namespace ropeserve::qa
