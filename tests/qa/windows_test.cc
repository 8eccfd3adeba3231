// Window properties over the tokenizer corpus: every context token is in
// some window, windows respect max_seq_len, consecutive windows overlap by
// doc_stride context tokens, p_mask opens exactly the context (and CLS),
// and offsets stay inside the context.
#include "server/qa/windows.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "server/qa/span_scoring.h"
#include "server/tokenizer/unicode.h"
#include "tests/common/scratch_dir.h"

namespace ropeserve::qa {
namespace {

using json = nlohmann::json;

std::vector<std::string> Corpus() {
  std::ifstream in(std::string(ROPESERVE_TEST_DATA) + "/golden/tokenizer_corpus.json");
  json j = json::parse(in);
  std::vector<std::string> texts;
  for (const auto& item : j["items"]) texts.push_back(item["text"]);
  return texts;
}

class Windows : public ::testing::TestWithParam<const char*> {};

TEST_P(Windows, CoverTheContextWithStrideOverlap) {
  auto tok = tok::Tokenizer::FromPath(std::string(ROPESERVE_TEST_DATA) + "/tokenizers/" + GetParam());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const auto texts = Corpus();
  std::vector<std::string> questions, contexts;
  for (const auto& t : texts) {
    if (!t.empty() && t.size() < 60) questions.push_back(t);
    if (t.size() > 200) contexts.push_back(t);
  }
  ASSERT_GE(questions.size(), 5u);
  ASSERT_GE(contexts.size(), 5u);
  int multi_window = 0, checked = 0;
  for (std::size_t qi = 0; qi < 8 && qi < questions.size(); ++qi) {
    for (std::size_t ci = 0; ci < contexts.size() && ci < 12; ++ci) {
      const std::string& q = questions[qi];
      // A long context: three corpus texts.
      const std::string c =
          contexts[ci] + " " + contexts[(ci + 1) % contexts.size()] + " " + contexts[(ci + 2) % contexts.size()];
      WindowOptions o;
      o.max_seq_len = 96;
      o.doc_stride = 24;
      auto windows = BuildWindows(**tok, q, c, o);
      if (!windows.ok()) continue;  // a question too long for 96 tokens
      ++checked;
      const auto whole = (*tok)->Encode(c, false);
      ASSERT_TRUE(whole.ok());
      const std::int64_t n_context = static_cast<std::int64_t>(whole->ids.size());
      const std::int64_t n_chars = static_cast<std::int64_t>(tok::CountCodePoints(c));
      std::vector<TokenId> covered;  // context token ids in order, without overlaps
      std::vector<TokenId> previous;
      for (std::size_t k = 0; k < windows->size(); ++k) {
        const WindowInput& in = (*windows)[k];
        const QaWindow& w = in.window;
        ASSERT_LE(in.ids.size(), 96u);
        ASSERT_EQ(w.p_mask.size(), in.ids.size());
        std::vector<TokenId> ctx_ids;
        for (std::size_t i = 0; i < in.ids.size(); ++i) {
          if (w.p_mask[i] == 0 && w.word_ids[i] >= 0) {
            ctx_ids.push_back(in.ids[i]);
            EXPECT_LE(0, w.offsets[i].first);
            EXPECT_LE(w.offsets[i].first, w.offsets[i].second);
            EXPECT_LE(w.offsets[i].second, n_chars);
          }
        }
        ASSERT_FALSE(ctx_ids.empty());
        if (k > 0) {
          // The first doc_stride context tokens repeat the previous window's last ones.
          const std::size_t overlap = std::min<std::size_t>(24, previous.size());
          ASSERT_GE(ctx_ids.size(), overlap);
          EXPECT_TRUE(
              std::equal(previous.end() - static_cast<std::ptrdiff_t>(overlap), previous.end(), ctx_ids.begin()))
              << "window " << k;
          covered.insert(covered.end(), ctx_ids.begin() + static_cast<std::ptrdiff_t>(overlap), ctx_ids.end());
        } else {
          covered = ctx_ids;
        }
        previous = ctx_ids;
      }
      // Together the windows hold the whole context once.
      EXPECT_EQ(static_cast<std::int64_t>(covered.size()), n_context);
      EXPECT_EQ(covered, whole->ids);
      multi_window += windows->size() > 1;
    }
  }
  EXPECT_GE(checked, 20);
  EXPECT_GE(multi_window, 10);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, Windows, ::testing::Values("synthetic/bert", "llama3", "qwen3", "llama2"));

// The synthetic BERT tokenizer with a tokenizer_config.json naming [CLS]:
// [CLS] question [SEP] context [SEP].
std::shared_ptr<const tok::Tokenizer> BertWithCls() {
  const testing::ScratchDir dir;
  std::filesystem::copy_file(std::string(ROPESERVE_TEST_DATA) + "/tokenizers/synthetic/bert/tokenizer.json",
                             dir / "tokenizer.json");
  std::ofstream(dir / "tokenizer_config.json") << R"({"cls_token": "[CLS]", "sep_token": "[SEP]"})";
  auto tok = tok::Tokenizer::FromPath(dir.path());
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return tok.ok() ? *tok : nullptr;
}

// The CLS slot stays open for the null answer; the question is masked.
TEST(Windows, PMaskKeepsClsOpen) {
  auto tok = BertWithCls();
  ASSERT_TRUE(tok);
  ASSERT_TRUE(tok->config().cls_token);
  auto w = BuildWindows(*tok, "who is here", "alice is here today", WindowOptions{});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->size(), 1u);
  const QaWindow& win = (*w)[0].window;
  EXPECT_EQ((*w)[0].ids[0], *tok->TokenToId("[CLS]"));
  EXPECT_EQ(win.p_mask[0], 0);      // [CLS]: the null answer's slot
  EXPECT_EQ(win.p_mask[1], 1);      // the question
  EXPECT_EQ(win.p_mask.back(), 1);  // [SEP]
  EXPECT_FALSE(BuildWindows(*tok, "", "context", WindowOptions{}).ok());
  EXPECT_FALSE(BuildWindows(*tok, "q", "", WindowOptions{}).ok());
  WindowOptions tiny;
  tiny.max_seq_len = 8;
  EXPECT_FALSE(BuildWindows(*tok, "a very long question that does not fit at all", "context", tiny).ok());
}

TEST(Windows, LongQuestionsAreCutAndLongContextsRefused) {
  auto tok = BertWithCls();
  ASSERT_TRUE(tok);
  std::string question;
  for (int i = 0; i < 40; ++i) question += "why is word" + std::to_string(i) + " here ";
  WindowOptions o;
  o.max_question_len = 10;
  auto w = BuildWindows(*tok, question, "alice is here today", o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  // [CLS], ten question tokens, [SEP], then the context (type 1).
  const auto& first = (*w)[0];
  const auto sep = *tok->TokenToId("[SEP]");
  EXPECT_EQ(std::find(first.ids.begin(), first.ids.end(), sep) - first.ids.begin(), 11);
  auto whole = tok->Encode(question, false);
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(std::equal(first.ids.begin() + 1, first.ids.begin() + 11, whole->ids.begin()));
  EXPECT_EQ(first.type_ids[12], 1u);
  o.max_context_bytes = 10;
  auto refused = BuildWindows(*tok, "who", "alice is here today", o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("limit"), std::string::npos);
}

// An answer in the last of many windows is found at its exact offsets:
// windows -> (logits pointing at one word of the last window) -> selection.
TEST(Windows, AnAnswerInTheLastWindowIsFound) {
  auto tok = BertWithCls();
  ASSERT_TRUE(tok);
  std::string context;
  for (int i = 0; i < 300; ++i) context += "filler" + std::to_string(i % 7) + " text ";
  const std::size_t needle = context.size();
  context += "zebra stripes";
  WindowOptions wo;
  wo.max_seq_len = 48;
  wo.doc_stride = 16;
  auto windows = BuildWindows(*tok, "which animal", context, wo);
  ASSERT_TRUE(windows.ok()) << windows.status().ToString();
  ASSERT_GT(windows->size(), 10u);
  std::vector<QaWindow> scored;
  for (std::size_t k = 0; k < windows->size(); ++k) {
    QaWindow w = (*windows)[k].window;
    w.start_logits.assign(w.p_mask.size(), 0.0f);
    w.end_logits.assign(w.p_mask.size(), 0.0f);
    if (k + 1 == windows->size()) {
      // The tokens of "zebra" (ASCII: code points are bytes).
      for (std::size_t i = 0; i < w.p_mask.size(); ++i) {
        if (w.p_mask[i] != 0 || w.offsets[i].first == w.offsets[i].second) continue;
        if (w.offsets[i].first == static_cast<std::int64_t>(needle)) w.start_logits[i] = 12;
        if (w.offsets[i].second == static_cast<std::int64_t>(needle + 5)) w.end_logits[i] = 12;
      }
    }
    scored.push_back(std::move(w));
  }
  for (Scoring mode : {Scoring::kPipeline, Scoring::kLogits}) {
    QaOptions o;
    o.scoring = mode;
    auto answers = SelectAnswers(scored, context, o);
    ASSERT_TRUE(answers.ok()) << answers.status().ToString();
    ASSERT_EQ(answers->size(), 1u);
    EXPECT_EQ((*answers)[0].text, "zebra");
    EXPECT_EQ((*answers)[0].start, static_cast<std::int64_t>(needle));
    EXPECT_EQ((*answers)[0].end, static_cast<std::int64_t>(needle + 5));
  }
}

}  // namespace
}  // namespace ropeserve::qa

namespace ropeserve::qa {
namespace {

// The windows of each passage with start/end logits planted on the tokens
// that begin at `start` and end at `end` (code points) of the passages in
// `plant` (passage -> logit).
std::vector<Passage> PlantedPassages(const tok::Tokenizer& tok, const std::vector<std::string>& texts,
                                     std::int64_t start, std::int64_t end, const std::map<std::size_t, float>& plant) {
  std::vector<Passage> out;
  WindowOptions wo;
  wo.max_seq_len = 48;
  wo.doc_stride = 16;
  for (std::size_t p = 0; p < texts.size(); ++p) {
    auto windows = BuildWindows(tok, "which animal", texts[p], wo);
    EXPECT_TRUE(windows.ok()) << windows.status().ToString();
    Passage passage;
    passage.context = &texts[p];
    for (auto& in : *windows) {
      QaWindow w = in.window;
      w.start_logits.assign(w.p_mask.size(), 0.0f);
      w.end_logits.assign(w.p_mask.size(), 0.0f);
      if (auto it = plant.find(p); it != plant.end())
        for (std::size_t i = 1; i < w.p_mask.size(); ++i) {
          if (w.p_mask[i] != 0) continue;
          if (w.offsets[i].first == start) w.start_logits[i] = it->second;
          if (w.offsets[i].second == end) w.end_logits[i] = it->second;
        }
      passage.windows.push_back(std::move(w));
    }
    out.push_back(std::move(passage));
  }
  return out;
}

// Five passages, the answer planted in the third after an accented word
// and an astral emoji (1 code point, 2 UTF-16 units, 4 bytes): passage 2
// wins in both scoring modes, with exact offsets in all three units.
TEST(MultiPassage, AnswerInTheThirdOfFivePassages) {
  auto tok = BertWithCls();
  ASSERT_TRUE(tok);
  std::vector<std::string> texts;
  for (int p = 0; p < 5; ++p) {
    std::string t;
    for (int i = 0; i < 20 + 15 * p; ++i) t += "filler" + std::to_string(i % 7) + " words ";
    texts.push_back(t);
  }
  texts[2] += "Le caf\xC3\xA9 co\xC3\xBBte \xF0\x9F\x98\x80 deux euros, puis zebra stripes ici.";
  const std::size_t needle_bytes = texts[2].find("zebra");
  const auto needle = static_cast<std::int64_t>(tok::CountCodePoints(texts[2].substr(0, needle_bytes)));
  ASSERT_EQ(needle_bytes, static_cast<std::size_t>(needle) + 1 + 1 + 3);  // é, û: 2 bytes; 😀: 4
  auto passages = PlantedPassages(*tok, texts, needle, needle + 5, {{2, 12.0f}});
  for (Scoring mode : {Scoring::kPipeline, Scoring::kLogits}) {
    SCOPED_TRACE(mode == Scoring::kPipeline ? "pipeline" : "logits");
    QaOptions o;
    o.scoring = mode;
    o.top_k = 1;
    auto answers = SelectAnswersAcross(passages, o);
    ASSERT_TRUE(answers.ok()) << answers.status().ToString();
    ASSERT_EQ(answers->size(), 1u);
    const Answer& a = (*answers)[0];
    EXPECT_EQ(a.text, "zebra");
    EXPECT_EQ(a.passage, 2);
    EXPECT_EQ(a.start, needle);
    EXPECT_EQ(a.end, needle + 5);
    EXPECT_EQ(ConvertOffsets(texts[2], a.start, a.end, OffsetUnit::kUtf16),
              (std::pair<std::int64_t, std::int64_t>{needle + 1, needle + 6}));  // the emoji is a surrogate pair
    const auto bytes = ConvertOffsets(texts[2], a.start, a.end, OffsetUnit::kUtf8Byte);
    EXPECT_EQ(bytes.first, static_cast<std::int64_t>(needle_bytes));
    EXPECT_EQ(
        texts[2].substr(static_cast<std::size_t>(bytes.first), static_cast<std::size_t>(bytes.second - bytes.first)),
        "zebra");
  }
}

// Equal logits in a short and a long passage give equal joint-pipeline
// scores (per-window softmaxes would favour the shorter window).
TEST(MultiPassage, PipelineScoresCompareAcrossPassages) {
  auto tok = BertWithCls();
  ASSERT_TRUE(tok);
  const std::vector<std::string> texts = {"zebra stripes",
                                          "zebra stripes and many more words in a longer passage here"};
  auto passages = PlantedPassages(*tok, texts, 0, 5, {{0, 3.0f}, {1, 3.0f}});
  QaOptions o;
  o.top_k = 2;
  o.handle_impossible_answer = true;
  // Whole-word widening merges the spans inside "zebra" (this tokenizer
  // cuts it into letters), and how many of them make the per-window
  // shortlist depends on the window's length: compare single spans.
  o.align_to_words = false;
  double null_score = -1;
  auto joint = SelectAnswersAcross(passages, o, &null_score);
  ASSERT_TRUE(joint.ok()) << joint.status().ToString();
  ASSERT_EQ(joint->size(), 2u);
  EXPECT_NE((*joint)[0].passage, (*joint)[1].passage);
  EXPECT_NEAR((*joint)[0].score, (*joint)[1].score, 1e-12 * (*joint)[0].score);
  EXPECT_GT(null_score, 0.0);
  EXPECT_LT(null_score, (*joint)[1].score);
  auto short_alone = SelectAnswers(passages[0].windows, texts[0], o);
  auto long_alone = SelectAnswers(passages[1].windows, texts[1], o);
  EXPECT_GT((*short_alone)[0].score, (*long_alone)[0].score * 1.5);
  // One passage of one window: the same as SelectAnswers, null score included.
  double alone_null = -1;
  auto one = SelectAnswersAcross({passages[0]}, o, &null_score);
  auto ref = SelectAnswers(passages[0].windows, texts[0], o, &alone_null);
  ASSERT_EQ(one->size(), ref->size());
  for (std::size_t i = 0; i < one->size(); ++i) {
    EXPECT_EQ((*one)[i].text, (*ref)[i].text);
    // One softmax over the same numbers; exp and the sum in another order.
    EXPECT_NEAR((*one)[i].score, (*ref)[i].score, 1e-12);
  }
  EXPECT_NEAR(null_score, alone_null, 1e-12);
}

TEST(MultiPassage, ConvertOffsets) {
  const std::string s =
      "a\xF0\x9F\x98\x80"
      "b\xC3\xA9"
      "c";  // a 😀 b é c: 5 code points
  EXPECT_EQ(ConvertOffsets(s, 1, 3, OffsetUnit::kCodePoint), (std::pair<std::int64_t, std::int64_t>{1, 3}));
  EXPECT_EQ(ConvertOffsets(s, 1, 3, OffsetUnit::kUtf16), (std::pair<std::int64_t, std::int64_t>{1, 4}));
  EXPECT_EQ(ConvertOffsets(s, 1, 3, OffsetUnit::kUtf8Byte), (std::pair<std::int64_t, std::int64_t>{1, 6}));
  EXPECT_EQ(ConvertOffsets(s, 4, 5, OffsetUnit::kUtf8Byte), (std::pair<std::int64_t, std::int64_t>{8, 9}));
  EXPECT_EQ(ConvertOffsets(s, 5, 5, OffsetUnit::kUtf16), (std::pair<std::int64_t, std::int64_t>{6, 6}));
  EXPECT_EQ(ConvertOffsets(s, 0, 0, OffsetUnit::kUtf16), (std::pair<std::int64_t, std::int64_t>{0, 0}));
  // Past the end: clamped to it.
  EXPECT_EQ(ConvertOffsets(s, 4, 9, OffsetUnit::kUtf16), (std::pair<std::int64_t, std::int64_t>{5, 6}));
  EXPECT_EQ(ConvertOffsets(s, 7, 9, OffsetUnit::kUtf8Byte), (std::pair<std::int64_t, std::int64_t>{9, 9}));
  // One map converts every pair the same.
  const OffsetMap utf16(s, OffsetUnit::kUtf16);
  for (std::int64_t a = 0; a <= 5; ++a)
    for (std::int64_t b = a; b <= 5; ++b) EXPECT_EQ(utf16(a, b), ConvertOffsets(s, a, b, OffsetUnit::kUtf16));
}

}  // namespace
}  // namespace ropeserve::qa
