// Extractive-QA answer selection from a span head's start/end logits over
// the windows of one (question, context) pair. Torch-free.
//
// Two documented scoring modes:
//  - kPipeline: Hugging Face's question-answering pipeline, exactly. Per
//    window: logits of tokens that cannot be in an answer (p_mask 1, or
//    padding) set to -10000, softmax of start and of end separately, the
//    null score start[0] * end[0] (position 0, the CLS slot) kept as the
//    minimum over windows, position 0 zeroed, span score start[s] * end[e]
//    for s <= e < s + max_answer_len; the best `top_k * 2 + 10` spans (when
//    aligning to words, else top_k), of which those whose both ends are
//    answerable tokens survive; spans mapped to characters (whole words when
//    align_to_words and word ids exist, else token offsets); answers with
//    the same text (case-insensitive) merged by adding their scores; the
//    null answer added when handle_impossible_answer; best top_k by score.
//    Scores are per-window probabilities, so they are not comparable across
//    windows (a known property of the pipeline). One deliberate difference:
//    spans of probability 0 are never returned (the reference can return
//    such meaningless spans when asked for more answers than a window has).
//  - kLogits: the SQuAD v2 evaluation recipe (postprocess_qa_predictions in
//    Hugging Face's run_qa examples): per window the n_best_size highest
//    start and end logits, valid pairs (both in the context, end >= start,
//    length <= max_answer_len) scored by start_logit + end_logit; the null
//    score start[0] + end[0] of the window where it is smallest; the best
//    n_best_size answers get probabilities by a softmax over their scores;
//    with handle_impossible_answer the empty answer wins when
//    null_score - best_score > null_score_diff_threshold.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/common/status.h"

namespace ropeserve::qa {

// One window of the pair encoding, as the span head saw it.
struct QaWindow {
  std::vector<float> start_logits;
  std::vector<float> end_logits;
  // 1 = cannot be part of an answer (question, special and padding tokens);
  // 0 = context tokens and the CLS slot (position 0), which stands for "no
  // answer".
  std::vector<std::uint8_t> p_mask;
  // Code-point offsets of each token into the context (meaningful where
  // p_mask is 0, except position 0).
  std::vector<std::pair<std::int64_t, std::int64_t>> offsets;
  // Optional: the context word each token belongs to (-1 for none), for
  // align_to_words.
  std::vector<std::int64_t> word_ids;
};

enum class Scoring { kPipeline, kLogits };

struct QaOptions {
  int top_k = 1;
  int max_answer_len = 15;  // tokens
  bool handle_impossible_answer = false;
  bool align_to_words = true;
  Scoring scoring = Scoring::kPipeline;
  int n_best_size = 20;                  // kLogits
  double null_score_diff_threshold = 0;  // kLogits
};

struct Answer {
  std::string text;
  double score = 0;
  std::int64_t start = 0;  // code points into the context (its passage's)
  std::int64_t end = 0;
  // SelectAnswersAcross: the passage it comes from (-1 for the null
  // answer); SelectAnswers: 0.
  std::int64_t passage = 0;
};

// `context` is the original context text (UTF-8); answers are its
// substrings: context[start:end] (in code points) == text. With
// handle_impossible_answer, `null_score` (when given) receives the null
// answer's score, in the answers' units.
StatusOr<std::vector<Answer>> SelectAnswers(const std::vector<QaWindow>& windows, const std::string& context,
                                            const QaOptions& options, double* null_score = nullptr);

// One passage of a multi-passage question: its text and its windows.
struct Passage {
  const std::string* context = nullptr;
  std::vector<QaWindow> windows;
};

// Answers to one question over several passages, ranked by scores that
// compare across passages (docs/qa.md):
//  - kLogits: SelectAnswers over every window of every passage at once
//    (start + end logit sums compare as they are; the n-best softmax spans
//    all passages);
//  - kPipeline: the start and the end softmax are each taken over every
//    window of every passage together (one distribution over all their
//    tokens, as if the passages were one context), so span probabilities
//    compare and sum to at most 1 over the whole request; the null score is
//    the start mass at the windows' CLS slots times the end mass there.
//    With one passage of one window this is exactly SelectAnswers.
// Answers with the same text merge within a passage only.
StatusOr<std::vector<Answer>> SelectAnswersAcross(const std::vector<Passage>& passages, const QaOptions& options,
                                                  double* null_score = nullptr);

// How answer offsets are counted: code points (Python's str, the default),
// UTF-16 code units (JavaScript, Java, C#), or UTF-8 bytes (Go, Rust, C).
enum class OffsetUnit { kCodePoint, kUtf16, kUtf8Byte };
// "code_point", "utf16", "utf8_byte" (the requests' `offset_unit`).
std::optional<OffsetUnit> ParseOffsetUnit(std::string_view name);
const char* OffsetUnitName(OffsetUnit unit);
// Code-point offsets of one text in `unit`, the text walked once (token
// classification converts an offset pair per token). Offsets past the end
// are clamped to it; code points are returned as they are.
class OffsetMap {
 public:
  OffsetMap(const std::string& text, OffsetUnit unit);
  std::pair<std::int64_t, std::int64_t> operator()(std::int64_t start, std::int64_t end) const;

 private:
  bool identity_;
  std::vector<std::int64_t> units_;  // units before code point i, i = 0..code points
};
// The code-point range [start, end) of `text` in `unit` (one OffsetMap).
std::pair<std::int64_t, std::int64_t> ConvertOffsets(const std::string& text, std::int64_t start, std::int64_t end,
                                                     OffsetUnit unit);

}  // namespace ropeserve::qa
