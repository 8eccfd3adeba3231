// Window properties over the tokenizer corpus: every context token is in
// some window, windows respect max_seq_len, consecutive windows overlap by
// doc_stride context tokens, p_mask opens exactly the context (and CLS),
// and offsets stay inside the context.
#include "server/qa/windows.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "server/qa/span_scoring.h"
#include "server/tokenizer/unicode.h"

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
      const std::string c = contexts[ci] + " " + contexts[(ci + 1) % contexts.size()] + " " +
                            contexts[(ci + 2) % contexts.size()];
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
      std::vector<std::uint32_t> covered;  // context token ids in order, without overlaps
      std::vector<std::uint32_t> previous;
      for (std::size_t k = 0; k < windows->size(); ++k) {
        const WindowInput& in = (*windows)[k];
        const QaWindow& w = in.window;
        ASSERT_LE(in.ids.size(), 96u);
        ASSERT_EQ(w.p_mask.size(), in.ids.size());
        std::vector<std::uint32_t> ctx_ids;
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
          EXPECT_TRUE(std::equal(previous.end() - static_cast<std::ptrdiff_t>(overlap), previous.end(), ctx_ids.begin()))
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
  const auto dir = std::filesystem::temp_directory_path() / ("ropeserve-qa-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(std::string(ROPESERVE_TEST_DATA) + "/tokenizers/synthetic/bert/tokenizer.json",
                             dir / "tokenizer.json", std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "tokenizer_config.json") << R"({"cls_token": "[CLS]", "sep_token": "[SEP]"})";
  auto tok = tok::Tokenizer::FromPath(dir.string());
  std::filesystem::remove_all(dir);
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
  EXPECT_EQ(win.p_mask[0], 0);  // [CLS]: the null answer's slot
  EXPECT_EQ(win.p_mask[1], 1);  // the question
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
