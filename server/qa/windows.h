// Windows of a (question, context) pair for a span head, as Hugging Face's
// question-answering pipeline builds them with a fast tokenizer: the pair
// encoded question first, context truncated "only_second" to max_seq_len
// with doc_stride tokens of overlap between consecutive windows (the
// tokenizer's overflowing encodings), no padding. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/qa/span_scoring.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve::qa {

struct WindowOptions {
  int max_seq_len = 384;
  // Overlap in tokens; nullopt = min(max_seq_len / 2, 128), the pipeline's default.
  std::optional<int> doc_stride;
  // A longer question is cut to its first max_question_len tokens (at a
  // token boundary of the question alone), as Hugging Face's SQuAD feature
  // conversion does (the fast-tokenizer pipeline ignores the parameter and
  // fails when the question leaves no room for context).
  int max_question_len = 64;
  // Contexts longer than this many bytes are refused (InvalidArgument).
  std::size_t max_context_bytes = 1 << 20;
  // A pair that needs more windows is refused (InvalidArgument) before
  // they are built. 0 = no limit.
  std::size_t max_windows = 0;
};

// One model input: ids and token types, and the QaWindow (p_mask, offsets
// into the context, word ids) its logits will be scored with.
struct WindowInput {
  std::vector<TokenId> ids;
  std::vector<std::uint32_t> type_ids;
  QaWindow window;  // logits empty until the model fills them
};

// p_mask is 1 outside the context (question, specials) except on the
// tokenizer's CLS token (cls_token of tokenizer_config.json /
// special_tokens_map.json), which stays 0: it is the null answer's slot.
// InvalidArgument for an empty question or context, a question too long
// for max_seq_len, or a stride that leaves no room for new context.
StatusOr<std::vector<WindowInput>> BuildWindows(const tok::Tokenizer& tokenizer, const std::string& question,
                                                const std::string& context, const WindowOptions& options);

}  // namespace ropeserve::qa
