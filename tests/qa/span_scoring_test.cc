// Answer selection worked through by hand on small logit arrays (the
// expected numbers are derived in the comments).
#include "server/qa/span_scoring.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ropeserve::qa {
namespace {

// [CLS, q, SEP, "ab", "cd", SEP] over the context "ab cd".
QaWindow TwoWordWindow(std::vector<float> start, std::vector<float> end) {
  QaWindow w;
  w.start_logits = std::move(start);
  w.end_logits = std::move(end);
  w.p_mask = {0, 1, 1, 0, 0, 1};
  w.offsets = {{0, 0}, {0, 0}, {0, 0}, {0, 2}, {3, 5}, {0, 0}};
  return w;
}

// Masked softmax of start [0, -, -, 1, 0, -]: CLS 1/(2+e) = a = 0.2119416,
// "ab" e/(2+e) = b = 0.5761169, "cd" a. End [0, -, -, 0, 1, -]: CLS a,
// "ab" a, "cd" b. Spans: (ab,ab) = b*a = 0.1221085, (ab,cd) = b*b =
// 0.3319106, (cd,cd) = a*b; null = a*a = 0.0449192.
constexpr double kA = 1.0 / (2.0 + M_E), kB = M_E / (2.0 + M_E);

TEST(PipelineScoring, ProductOfWindowSoftmaxesBestFirst) {
  const std::vector<QaWindow> w = {TwoWordWindow({0, 5, 5, 1, 0, 9}, {0, 5, 5, 0, 1, 9})};
  QaOptions o;
  o.top_k = 3;
  auto r = SelectAnswers(w, "ab cd", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].text, "ab cd");
  EXPECT_NEAR((*r)[0].score, kB * kB, 1e-9);
  EXPECT_EQ((*r)[0].start, 0);
  EXPECT_EQ((*r)[0].end, 5);
  // A tie: the earlier start comes first (numpy's row-major argmax order).
  EXPECT_EQ((*r)[1].text, "ab");
  EXPECT_NEAR((*r)[1].score, kA * kB, 1e-9);
  EXPECT_EQ((*r)[2].text, "cd");
  EXPECT_EQ((*r)[2].start, 3);
  // The question tokens' huge logits never produce an answer.
  o.top_k = 1;
  o.max_answer_len = 1;  // (ab, cd) is two tokens long
  r = SelectAnswers(w, "ab cd", o);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].text, "ab");
}

TEST(PipelineScoring, NullAnswerIsTheCLSProductAndSortsWithTheRest) {
  const std::vector<QaWindow> w = {TwoWordWindow({0, 5, 5, 1, 0, 9}, {0, 5, 5, 0, 1, 9})};
  QaOptions o;
  o.top_k = 4;
  o.handle_impossible_answer = true;
  auto r = SelectAnswers(w, "ab cd", o);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[3].text, "");
  EXPECT_NEAR((*r)[3].score, kA * kA, 1e-9);
  // Make the null slot dominant: its score is computed before CLS is zeroed.
  const std::vector<QaWindow> null_wins = {TwoWordWindow({9, 0, 0, 0, 0, 0}, {9, 0, 0, 0, 0, 0})};
  o.top_k = 1;
  r = SelectAnswers(null_wins, "ab cd", o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].text, "");
  const double cls = std::exp(9.0) / (std::exp(9.0) + 2.0);
  EXPECT_NEAR((*r)[0].score, cls * cls, 1e-9);
}

// Two windows over "Paris paris": window A holds "Paris" (0,5), B holds
// "paris" (6,11). A: start/end softmax over [0, 2] -> CLS 1/(1+e^2) =
// 0.1192029, "Paris" 0.8807971; span 0.7758034, null 0.0142093. B: over
// [0, 1] -> CLS 0.2689414, "paris" 0.7310586; span 0.5344466, null
// 0.0723295. Same text case-insensitively: scores add, the first keeps its
// place; the null answer is the minimum over windows.
TEST(PipelineScoring, WindowsMergeSameTextAndTakeTheSmallestNull) {
  QaWindow a;
  a.start_logits = a.end_logits = {0, 0, 0, 2, 0};
  a.p_mask = {0, 1, 1, 0, 1};
  a.offsets = {{0, 0}, {0, 0}, {0, 0}, {0, 5}, {0, 0}};
  QaWindow b = a;
  b.start_logits = b.end_logits = {0, 0, 0, 1, 0};
  b.offsets[3] = {6, 11};
  QaOptions o;
  o.top_k = 2;
  o.handle_impossible_answer = true;
  auto r = SelectAnswers({a, b}, "Paris paris", o);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 2u);
  const double pa = std::exp(2.0) / (1 + std::exp(2.0)), pb = std::exp(1.0) / (1 + std::exp(1.0));
  EXPECT_EQ((*r)[0].text, "Paris");
  EXPECT_EQ((*r)[0].start, 0);
  EXPECT_NEAR((*r)[0].score, pa * pa + pb * pb, 1e-9);
  EXPECT_EQ((*r)[1].text, "");
  EXPECT_NEAR((*r)[1].score, (1 - pa) * (1 - pa), 1e-9);
}

// "Hello world" as "Hel" "lo" "world": the best span is the single token
// "lo"; aligned to words it becomes "Hello".
TEST(PipelineScoring, AlignToWordsWidensToWholeWords) {
  QaWindow w;
  w.start_logits = {0, 0, 0, 0, 4, 0, 0};
  w.end_logits = {0, 0, 0, 0, 4, 0, 0};
  w.p_mask = {0, 1, 1, 0, 0, 0, 1};
  w.offsets = {{0, 0}, {0, 0}, {0, 0}, {0, 3}, {3, 5}, {6, 11}, {0, 0}};
  w.word_ids = {-1, -1, -1, 0, 0, 1, -1};
  QaOptions o;
  auto r = SelectAnswers({w}, "Hello world", o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].text, "Hello");
  EXPECT_EQ((*r)[0].end, 5);
  o.align_to_words = false;
  r = SelectAnswers({w}, "Hello world", o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].text, "lo");
  EXPECT_EQ((*r)[0].start, 3);
}

TEST(PipelineScoring, OffsetsAreCodePoints) {
  // "né ok": "né" is 2 code points, 3 bytes.
  QaWindow w = TwoWordWindow({0, 0, 0, 0, 3, 0}, {0, 0, 0, 0, 3, 0});
  w.offsets[4] = {3, 5};
  auto r = SelectAnswers({w}, "né ok", QaOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].text, "ok");
  EXPECT_EQ((*r)[0].start, 3);
}

// Logits mode, window [CLS, q, SEP, "ab", "cd", SEP], start [1,9,9,3,0,9],
// end [1,9,9,0,2,9]: spans (ab,ab) 3+0 = 3, (ab,cd) 3+2 = 5, (cd,cd) 0+2 =
// 2; null 1+1 = 2. Probabilities: softmax of [5, 3, 2] = [0.8437947,
// 0.1141952, 0.0420101].
TEST(LogitsScoring, SumOfLogitsAndSoftmaxOverTheNBest) {
  const std::vector<QaWindow> w = {TwoWordWindow({1, 9, 9, 3, 0, 9}, {1, 9, 9, 0, 2, 9})};
  QaOptions o;
  o.scoring = Scoring::kLogits;
  o.top_k = 3;
  auto r = SelectAnswers(w, "ab cd", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  const double z = 1 + std::exp(-2.0) + std::exp(-3.0);
  EXPECT_EQ((*r)[0].text, "ab cd");
  EXPECT_NEAR((*r)[0].score, 1 / z, 1e-9);
  EXPECT_EQ((*r)[1].text, "ab");
  EXPECT_NEAR((*r)[1].score, std::exp(-2.0) / z, 1e-9);
  EXPECT_EQ((*r)[2].text, "cd");
  // n_best_size 1: the best start and end logits are the question's and
  // separator's 9s (the later index on ties, as numpy's reversed argsort),
  // which are no span: no answer (the reference reports "empty").
  o.n_best_size = 1;
  r = SelectAnswers(w, "ab cd", o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
  // n_best_size 4 reaches "ab" (3) among the starts and "cd" (2) among the
  // ends: 9, 9, 9, 3 and 9, 9, 9, 2.
  o.n_best_size = 4;
  r = SelectAnswers(w, "ab cd", o);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].text, "ab cd");
  EXPECT_NEAR((*r)[0].score, 1.0, 1e-12);
}

// With the null answer: softmax of [5, 3, 2, 2(null)]; the null answer wins
// only when null - best = 2 - 5 = -3 exceeds the threshold.
TEST(LogitsScoring, NullScoreDiffThresholdDecides) {
  const std::vector<QaWindow> w = {TwoWordWindow({1, 9, 9, 3, 0, 9}, {1, 9, 9, 0, 2, 9})};
  QaOptions o;
  o.scoring = Scoring::kLogits;
  o.handle_impossible_answer = true;
  const double z = 1 + std::exp(-2.0) + 2 * std::exp(-3.0);
  auto r = SelectAnswers(w, "ab cd", o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].text, "ab cd");
  EXPECT_NEAR((*r)[0].score, 1 / z, 1e-9);
  o.null_score_diff_threshold = -4;
  o.top_k = 2;
  r = SelectAnswers(w, "ab cd", o);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].text, "");
  EXPECT_NEAR((*r)[0].score, std::exp(-3.0) / z, 1e-9);
  EXPECT_EQ((*r)[1].text, "ab cd");
}

TEST(SpanScoring, BadInputIsAnError) {
  QaWindow w = TwoWordWindow({0, 0, 0, 1, 0, 0}, {0, 0, 0, 1, 0, 0});
  QaOptions o;
  o.top_k = 0;
  EXPECT_FALSE(SelectAnswers({w}, "ab cd", o).ok());
  EXPECT_FALSE(SelectAnswers({}, "ab cd", QaOptions{}).ok());
  QaWindow short_mask = w;
  short_mask.p_mask.pop_back();
  EXPECT_FALSE(SelectAnswers({short_mask}, "ab cd", QaOptions{}).ok());
  QaWindow outside = w;
  outside.offsets[3] = {0, 99};
  EXPECT_FALSE(SelectAnswers({outside}, "ab cd", QaOptions{}).ok());
  QaWindow bad_len = w;
  bad_len.word_ids = {1};
  EXPECT_FALSE(SelectAnswers({bad_len}, "ab cd", QaOptions{}).ok());
}

}  // namespace
}  // namespace ropeserve::qa
