// Entities from a token classifier's logits (…ForTokenClassification), as
// transformers' TokenClassificationPipeline.postprocess computes them:
//  - each token's softmax over the labels; special tokens are left out;
//  - `aggregation_strategy` none: one entity per token (its best label);
//    simple: adjacent tokens of the same tag grouped (B-/I- prefixes: a B-
//    starts a new group); first / max / average: tokens merged into words
//    first (the word's label from its first token, from its most confident
//    token, or from the mean of its tokens' scores), then grouped as simple;
//  - entities whose label (or group) is in `ignore_labels` dropped.
// Words: a token continues a word when the tokenizer marks continuations
// (WordPiece's "##": its text is longer than the span it covers), else when
// neither the character before it nor its first is a space (the pipeline's
// fallback). Offsets are code points of the text, as Python's str.
// Model-free: tests feed logits directly (tests/qa/token_entities_test.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve::qa {

enum class Aggregation { kNone, kSimple, kFirst, kMax, kAverage };
// "none", "simple", "first", "max", "average" (any case, as transformers'
// AggregationStrategy[name.upper()]).
std::optional<Aggregation> ParseAggregation(std::string_view name);
const char* AggregationName(Aggregation a);

struct Entity {
  // The label (kNone: the token's, transformers' "entity") or the group's
  // tag, its B-/I- prefix removed ("entity_group").
  std::string label;
  double score = 0;
  std::string word;
  std::int64_t start = 0, end = 0;  // code points of the text
  std::int64_t index = -1;          // kNone: the token's position in the encoding
};

struct TokenLogits {
  const std::string& text;
  const tok::Encoding& encoding;     // the text's, with its special tokens
  const std::vector<float>& logits;  // [encoding.size(), labels.size()] row-major
  const std::vector<std::string>& labels;
};

// One token before aggregation (the pipeline's pre_entity): its string
// (the text it covers when it is the unknown token), its label
// probabilities, and whether it continues the word before it.
struct TokenScores {
  std::string word;
  std::vector<double> scores;
  std::int64_t start = 0, end = 0, index = 0;
  bool is_subword = false;
};

// gather_pre_entities: the softmax of each token that is not special.
StatusOr<std::vector<TokenScores>> GatherTokens(const TokenLogits& in, const tok::Tokenizer& tokenizer);
// aggregate, then the ignore_labels filter. Words are spelled by the
// tokenizer's decoder (DecodeTokens).
StatusOr<std::vector<Entity>> Aggregate(const std::vector<TokenScores>& tokens, const std::vector<std::string>& labels,
                                        const tok::Tokenizer& tokenizer, Aggregation aggregation,
                                        const std::vector<std::string>& ignore_labels);
// Both.
StatusOr<std::vector<Entity>> GroupEntities(const TokenLogits& in, const tok::Tokenizer& tokenizer,
                                            Aggregation aggregation, const std::vector<std::string>& ignore_labels);

}  // namespace ropeserve::qa
