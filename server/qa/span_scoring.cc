#include "server/qa/span_scoring.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "server/tokenizer/unicode.h"

namespace ropeserve::qa {

namespace {

// Python's str.lower() for comparing answers.
std::string Lower(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 0;
    const char32_t c = tok::DecodeUtf8(s, i, &len);
    for (char32_t l : tok::ToLowercase(c)) tok::AppendUtf8(&out, l);
    i += std::max<std::size_t>(len, 1);
  }
  return out;
}

Status CheckWindow(const QaWindow& w, std::size_t index) {
  const std::size_t n = w.start_logits.size();
  if (n == 0 || w.end_logits.size() != n || w.p_mask.size() != n || w.offsets.size() != n ||
      (!w.word_ids.empty() && w.word_ids.size() != n)) {
    return InvalidArgument("QA window " + std::to_string(index) +
                           ": logits, p_mask, offsets and word ids differ in length");
  }
  return Status::Ok();
}

// Softmax over a window with unanswerable positions at -10000 (HF).
std::vector<double> MaskedSoftmax(const std::vector<float>& logits, const std::vector<std::uint8_t>& p_mask) {
  std::vector<double> p(logits.size());
  double max = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] = p_mask[i] ? -10000.0 : static_cast<double>(logits[i]);
    max = std::max(max, p[i]);
  }
  double sum = 0;
  for (auto& v : p) sum += v = std::exp(v - max);
  for (auto& v : p) v /= sum;
  return p;
}

struct Span {
  std::size_t start, end;
  double score;
};

// The character range of tokens [s, e] of a window: whole words when
// aligning to words and both tokens have one, else the tokens' offsets.
std::pair<std::int64_t, std::int64_t> SpanChars(const QaWindow& w, std::size_t s, std::size_t e, bool align_to_words) {
  if (align_to_words && !w.word_ids.empty() && w.word_ids[s] >= 0 && w.word_ids[e] >= 0) {
    std::int64_t begin = std::numeric_limits<std::int64_t>::max(), end = -1;
    for (std::size_t i = 0; i < w.word_ids.size(); ++i) {
      if (w.p_mask[i] != 0 || i == 0) continue;  // context tokens only
      if (w.word_ids[i] == w.word_ids[s]) begin = std::min(begin, w.offsets[i].first);
      if (w.word_ids[i] == w.word_ids[e]) end = std::max(end, w.offsets[i].second);
    }
    if (end >= 0 && begin <= end) return {begin, end};
  }
  return {w.offsets[s].first, w.offsets[e].second};
}

StatusOr<Answer> MakeAnswer(const std::string& context, const std::vector<std::size_t>& cp, std::int64_t start,
                            std::int64_t end, double score) {
  const auto n = static_cast<std::int64_t>(cp.size()) - 1;
  if (start < 0 || end < start || end > n) {
    return InvalidArgument("QA span [" + std::to_string(start) + ", " + std::to_string(end) +
                           ") is outside the context of " + std::to_string(n) + " code points");
  }
  Answer a;
  a.start = start;
  a.end = end;
  a.score = score;
  a.text = context.substr(cp[static_cast<std::size_t>(start)],
                          cp[static_cast<std::size_t>(end)] - cp[static_cast<std::size_t>(start)]);
  return a;
}

// Softmax normaliser of several windows at once (joint scoring): the
// largest masked logit and the sum of exp(logit - max) over all of them.
struct Normaliser {
  double max = -std::numeric_limits<double>::infinity();
  double sum = 0;
};
template <typename Logits>
Normaliser JointNormaliser(const std::vector<Passage>& passages, Logits logits) {
  Normaliser n;
  for (const Passage& p : passages)
    for (const QaWindow& w : p.windows)
      for (std::size_t i = 0; i < w.p_mask.size(); ++i)
        n.max = std::max(n.max, w.p_mask[i] ? -10000.0 : static_cast<double>(logits(w)[i]));
  for (const Passage& p : passages)
    for (const QaWindow& w : p.windows)
      for (std::size_t i = 0; i < w.p_mask.size(); ++i)
        n.sum += std::exp((w.p_mask[i] ? -10000.0 : static_cast<double>(logits(w)[i])) - n.max);
  return n;
}
std::vector<double> JointProbabilities(const std::vector<float>& logits, const std::vector<std::uint8_t>& p_mask,
                                       const Normaliser& n) {
  std::vector<double> p(logits.size());
  for (std::size_t i = 0; i < p.size(); ++i)
    p[i] = std::exp((p_mask[i] ? -10000.0 : static_cast<double>(logits[i])) - n.max) / n.sum;
  return p;
}

// `joint`: one softmax over all windows of all passages (SelectAnswersAcross);
// else one per window (the Hugging Face pipeline).
StatusOr<std::vector<Answer>> Pipeline(const std::vector<Passage>& passages, const QaOptions& o, bool joint,
                                       double* null_out) {
  double min_null_score = 1000000;    // large and positive, as the reference
  double cls_start = 0, cls_end = 0;  // joint: mass at the CLS slots
  Normaliser ns, ne;
  if (joint) {
    ns = JointNormaliser(passages, [](const QaWindow& w) -> const std::vector<float>& { return w.start_logits; });
    ne = JointNormaliser(passages, [](const QaWindow& w) -> const std::vector<float>& { return w.end_logits; });
  }
  std::vector<Answer> answers;
  const std::size_t pre_top_k = o.align_to_words ? static_cast<std::size_t>(o.top_k) * 2 + 10 : o.top_k;
  for (std::size_t pi = 0; pi < passages.size(); ++pi) {
    const std::string& context = *passages[pi].context;
    const auto cp = tok::CodePointStarts(context);
    for (const QaWindow& w : passages[pi].windows) {
      const std::size_t n = w.start_logits.size();
      std::vector<double> start =
          joint ? JointProbabilities(w.start_logits, w.p_mask, ns) : MaskedSoftmax(w.start_logits, w.p_mask);
      std::vector<double> end =
          joint ? JointProbabilities(w.end_logits, w.p_mask, ne) : MaskedSoftmax(w.end_logits, w.p_mask);
      min_null_score = std::min(min_null_score, start[0] * end[0]);
      cls_start += start[0];
      cls_end += end[0];
      start[0] = end[0] = 0;
      // Every (s, e) cell of the n x n score matrix, zero outside the band
      // s <= e < s + max_answer_len; the best pre_top_k by score, ties in
      // row-major order (numpy's argmax for top_k 1).
      std::vector<Span> cells;
      cells.reserve(n * static_cast<std::size_t>(std::min<std::size_t>(n, o.max_answer_len)) + 1);
      for (std::size_t s = 0; s < n; ++s)
        for (std::size_t e = s; e < n && e < s + static_cast<std::size_t>(o.max_answer_len); ++e)
          cells.push_back({s, e, start[s] * end[e]});
      // Cells outside the band, at the CLS slot or at masked tokens score 0
      // (exp(-10000) underflows). The reference can return such zero-score
      // cells when a window has fewer positive spans than it asks for (with
      // start > end, or starting at CLS): meaningless answers of score 0 that
      // are left out here. Otherwise the selection is the same.
      const std::size_t k = std::min(pre_top_k, cells.size());
      std::partial_sort(cells.begin(), cells.begin() + static_cast<std::ptrdiff_t>(k), cells.end(),
                        [n](const Span& a, const Span& b) {
                          if (a.score != b.score) return a.score > b.score;
                          return a.start * n + a.end < b.start * n + b.end;
                        });
      cells.resize(k);
      for (const Span& sp : cells) {
        if (sp.score <= 0) continue;
        if (w.p_mask[sp.start] != 0 || w.p_mask[sp.end] != 0) continue;  // an end outside the context
        auto [cs, ce] = SpanChars(w, sp.start, sp.end, o.align_to_words);
        RS_ASSIGN_OR_RETURN(Answer a, MakeAnswer(context, cp, cs, ce, sp.score));
        a.passage = static_cast<std::int64_t>(pi);
        // The same text (case-insensitively) from another span or window of
        // the passage adds its score to the first one found.
        const std::string key = Lower(a.text);
        auto same = std::find_if(answers.begin(), answers.end(),
                                 [&](const Answer& b) { return b.passage == a.passage && Lower(b.text) == key; });
        if (same != answers.end()) {
          same->score += a.score;
        } else {
          answers.push_back(std::move(a));
        }
      }
    }
  }
  const double null_score = joint ? cls_start * cls_end : min_null_score;
  if (o.handle_impossible_answer) {
    answers.push_back(Answer{"", null_score, 0, 0, joint ? -1 : 0});
    if (null_out != nullptr) *null_out = null_score;
  }
  std::stable_sort(answers.begin(), answers.end(), [](const Answer& a, const Answer& b) { return a.score > b.score; });
  if (answers.size() > static_cast<std::size_t>(o.top_k)) answers.resize(static_cast<std::size_t>(o.top_k));
  return answers;
}

// Indices of the `k` largest values, largest first; ties as numpy's
// argsort(...)[::-1] gives them for distinct positions (later index first).
std::vector<std::size_t> TopIndices(const std::vector<float>& v, std::size_t k) {
  std::vector<std::size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
    if (v[a] != v[b]) return v[a] > v[b];
    return a > b;
  });
  if (idx.size() > k) idx.resize(k);
  return idx;
}

// `multi`: several passages (the null answer then belongs to none).
StatusOr<std::vector<Answer>> Logits(const std::vector<Passage>& passages, const QaOptions& o, bool multi,
                                     double* null_out) {
  std::vector<std::vector<std::size_t>> cps;
  for (const Passage& p : passages) cps.push_back(tok::CodePointStarts(*p.context));
  struct Pred {
    std::int64_t start, end;
    double score;  // start_logit + end_logit
    bool null;
    std::size_t passage = 0;
  };
  std::vector<Pred> preds;
  bool have_null = false;
  Pred null_pred{0, 0, 0, true};
  for (std::size_t pi = 0; pi < passages.size(); ++pi)
    for (const QaWindow& w : passages[pi].windows) {
      const double feature_null = static_cast<double>(w.start_logits[0]) + w.end_logits[0];
      if (!have_null || null_pred.score > feature_null) {
        null_pred.score = feature_null;
        have_null = true;
      }
      const auto starts = TopIndices(w.start_logits, static_cast<std::size_t>(o.n_best_size));
      const auto ends = TopIndices(w.end_logits, static_cast<std::size_t>(o.n_best_size));
      for (std::size_t s : starts) {
        for (std::size_t e : ends) {
          // Only context tokens have offsets (position 0 is the null slot).
          if (s == 0 || e == 0 || w.p_mask[s] != 0 || w.p_mask[e] != 0) continue;
          if (e < s || e - s + 1 > static_cast<std::size_t>(o.max_answer_len)) continue;
          preds.push_back({w.offsets[s].first, w.offsets[e].second,
                           static_cast<double>(w.start_logits[s]) + w.end_logits[e], false, pi});
        }
      }
    }
  if (o.handle_impossible_answer && have_null) preds.push_back(null_pred);
  std::stable_sort(preds.begin(), preds.end(), [](const Pred& a, const Pred& b) { return a.score > b.score; });
  if (preds.size() > static_cast<std::size_t>(o.n_best_size)) preds.resize(static_cast<std::size_t>(o.n_best_size));
  if (o.handle_impossible_answer && have_null &&
      std::none_of(preds.begin(), preds.end(), [](const Pred& p) { return p.null; })) {
    preds.push_back(null_pred);
  }
  if (preds.empty()) return std::vector<Answer>{};
  // Probabilities: a softmax over the kept predictions' scores.
  double max = -std::numeric_limits<double>::infinity(), sum = 0;
  for (const auto& p : preds) max = std::max(max, p.score);
  for (const auto& p : preds) sum += std::exp(p.score - max);
  std::vector<Answer> non_null;
  std::optional<Answer> null_answer;
  const Pred* best_non_null = nullptr;
  for (const auto& p : preds) {
    RS_ASSIGN_OR_RETURN(Answer a, MakeAnswer(*passages[p.passage].context, cps[p.passage], p.start, p.end,
                                             std::exp(p.score - max) / sum));
    a.passage = p.null && multi ? -1 : static_cast<std::int64_t>(p.passage);
    if (p.null) {
      if (null_out != nullptr) *null_out = a.score;
      null_answer = std::move(a);
      continue;
    }
    if (best_non_null == nullptr && !a.text.empty()) best_non_null = &p;
    non_null.push_back(std::move(a));
  }
  std::vector<Answer> out;
  if (o.handle_impossible_answer && null_answer &&
      (best_non_null == nullptr || null_pred.score - best_non_null->score > o.null_score_diff_threshold)) {
    out.push_back(*null_answer);
  }
  for (auto& a : non_null) out.push_back(std::move(a));
  if (out.size() > static_cast<std::size_t>(o.top_k)) out.resize(static_cast<std::size_t>(o.top_k));
  return out;
}

}  // namespace

Status CheckOptions(const QaOptions& options) {
  if (options.top_k < 1 || options.top_k > 100) return InvalidArgument("top_k must be between 1 and 100");
  if (options.max_answer_len < 1) return InvalidArgument("max_answer_len must be at least 1");
  if (options.n_best_size < 1 || options.n_best_size > 1000)
    return InvalidArgument("n_best_size must be between 1 and 1000");
  return Status::Ok();
}

StatusOr<std::vector<Answer>> SelectAnswers(const std::vector<QaWindow>& windows, const std::string& context,
                                            const QaOptions& options, double* null_score) {
  RS_RETURN_IF_ERROR(CheckOptions(options));
  if (windows.empty()) return InvalidArgument("no QA windows");
  for (std::size_t i = 0; i < windows.size(); ++i) RS_RETURN_IF_ERROR(CheckWindow(windows[i], i));
  const std::vector<Passage> one = {Passage{&context, windows}};
  return options.scoring == Scoring::kPipeline ? Pipeline(one, options, false, null_score)
                                               : Logits(one, options, false, null_score);
}

StatusOr<std::vector<Answer>> SelectAnswersAcross(const std::vector<Passage>& passages, const QaOptions& options,
                                                  double* null_score) {
  RS_RETURN_IF_ERROR(CheckOptions(options));
  std::size_t index = 0;
  for (const Passage& p : passages) {
    if (p.context == nullptr) return InvalidArgument("a QA passage has no text");
    for (const QaWindow& w : p.windows) RS_RETURN_IF_ERROR(CheckWindow(w, index++));
  }
  if (index == 0) return InvalidArgument("no QA windows");
  return options.scoring == Scoring::kPipeline ? Pipeline(passages, options, true, null_score)
                                               : Logits(passages, options, true, null_score);
}

std::optional<OffsetUnit> ParseOffsetUnit(std::string_view name) {
  if (name == "code_point") return OffsetUnit::kCodePoint;
  if (name == "utf16") return OffsetUnit::kUtf16;
  if (name == "utf8_byte") return OffsetUnit::kUtf8Byte;
  return std::nullopt;
}

const char* OffsetUnitName(OffsetUnit unit) {
  switch (unit) {
    case OffsetUnit::kUtf16:
      return "utf16";
    case OffsetUnit::kUtf8Byte:
      return "utf8_byte";
    case OffsetUnit::kCodePoint:
      break;
  }
  return "code_point";
}

OffsetMap::OffsetMap(const std::string& text, OffsetUnit unit) : identity_(unit == OffsetUnit::kCodePoint) {
  if (identity_) return;
  units_.push_back(0);
  for (std::size_t i = 0; i < text.size();) {
    std::size_t len = 0;
    const char32_t c = tok::DecodeUtf8(text, i, &len);
    len = std::max<std::size_t>(len, 1);
    units_.push_back(units_.back() +
                     (unit == OffsetUnit::kUtf8Byte ? static_cast<std::int64_t>(len) : (c >= 0x10000 ? 2 : 1)));
    i += len;
  }
}

std::pair<std::int64_t, std::int64_t> OffsetMap::operator()(std::int64_t start, std::int64_t end) const {
  if (identity_) return {start, end};
  const auto at = [&](std::int64_t cp) {
    return units_[static_cast<std::size_t>(
        std::clamp<std::int64_t>(cp, 0, static_cast<std::int64_t>(units_.size()) - 1))];
  };
  return {at(start), at(end)};
}

std::pair<std::int64_t, std::int64_t> ConvertOffsets(const std::string& text, std::int64_t start, std::int64_t end,
                                                     OffsetUnit unit) {
  return OffsetMap(text, unit)(start, end);
}

}  // namespace ropeserve::qa
