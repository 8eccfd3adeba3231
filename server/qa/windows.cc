#include "server/qa/windows.h"

#include "server/tokenizer/unicode.h"

namespace ropeserve::qa {

namespace {

WindowInput ToInput(const tok::Encoding& e, std::optional<TokenId> cls_id) {
  WindowInput in;
  in.ids = e.ids;
  in.type_ids = e.type_ids;
  QaWindow& w = in.window;
  const std::size_t n = e.ids.size();
  w.p_mask.resize(n);
  w.offsets.resize(n);
  w.word_ids.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const bool context = e.sequence_ids[i] == 1;
    w.p_mask[i] = context ? 0 : 1;
    if (cls_id && e.ids[i] == *cls_id) w.p_mask[i] = 0;
    w.offsets[i] = context ? std::pair<std::int64_t, std::int64_t>(e.offsets[i].start, e.offsets[i].end)
                           : std::pair<std::int64_t, std::int64_t>(0, 0);
    w.word_ids[i] = context ? e.words[i] : -1;
  }
  return in;
}

}  // namespace

StatusOr<std::vector<WindowInput>> BuildWindows(const tok::Tokenizer& tokenizer, const std::string& question,
                                                const std::string& context, const WindowOptions& o) {
  if (question.empty()) return InvalidArgument("'question' must not be empty");
  if (context.empty()) return InvalidArgument("'context' must not be empty");
  if (o.max_seq_len < 8 || o.max_seq_len > 1 << 20) return InvalidArgument("max_seq_len must be between 8 and 1048576");
  if (o.max_question_len < 1) return InvalidArgument("max_question_len must be positive");
  if (context.size() > o.max_context_bytes)
    return InvalidArgument("the context has " + std::to_string(context.size()) + " bytes; the limit is " +
                           std::to_string(o.max_context_bytes));
  // The question's first max_question_len tokens (code-point offsets -> bytes).
  std::string_view q = question;
  auto q_enc = tokenizer.Encode(question, /*add_special_tokens=*/false);
  if (!q_enc.ok()) return q_enc.status();
  if (q_enc->ids.size() > static_cast<std::size_t>(o.max_question_len)) {
    const std::size_t end_cp = q_enc->offsets[static_cast<std::size_t>(o.max_question_len) - 1].end;
    std::size_t bytes = 0;
    for (std::size_t cp = 0; cp < end_cp && bytes < question.size(); ++cp)
      bytes += tok::Utf8LeadLength(static_cast<unsigned char>(question[bytes]));
    q = q.substr(0, bytes);
  }
  const int stride = o.doc_stride.value_or(std::min(o.max_seq_len / 2, 128));
  if (stride < 0) return InvalidArgument("doc_stride must not be negative");
  tok::Truncation t;
  t.max_length = static_cast<std::size_t>(o.max_seq_len);
  t.stride = static_cast<std::size_t>(stride);
  t.strategy = tok::TruncationStrategy::kOnlySecond;
  t.max_windows = o.max_windows;
  auto e = tokenizer.EncodePair(q, context, /*add_special_tokens=*/true, t);
  if (!e.ok())
    return e.status().WithContext(
        "cannot split the context into windows (is the question too long for "
        "max_seq_len, or doc_stride too large?)");
  std::optional<TokenId> cls_id;
  if (const auto& cls = tokenizer.config().cls_token) cls_id = tokenizer.TokenToId(*cls);
  // The main encoding, then its overflowing windows (the pipeline's order).
  std::vector<WindowInput> out;
  out.push_back(ToInput(*e, cls_id));
  for (const tok::Encoding& over : e->overflowing) out.push_back(ToInput(over, cls_id));
  return out;
}

}  // namespace ropeserve::qa
