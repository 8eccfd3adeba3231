// Splits a long document into chunks that fit a model's context, for
// map-reduce and refine summarization (server/service/document_summary.h).
// Pure text arithmetic over token spans: no tokenizer, no model, so the
// rules below are tested on real text without either.
//
// Rules:
//  - a chunk holds at most `max_tokens` tokens (token spans of the whole
//    document, as the tokenizer cut it);
//  - a chunk ends at the best boundary in the second half of its token
//    budget: a paragraph break (a blank line) before a sentence end (., !,
//    ?, or a CJK full stop, possibly followed by closing quotes/brackets)
//    before a line break before a space; the latest one of the best kind.
//    Only when the second half holds no space at all (a run of symbols) is
//    the chunk cut between two tokens;
//  - consecutive chunks overlap by at most `overlap_tokens` tokens: the next
//    chunk starts at the best boundary (same ranking, earliest of the best
//    kind) within the last `overlap_tokens` tokens of the previous one, or
//    right after it when there is none. Each chunk starts after the start of
//    the previous one, so the split always ends;
//  - chunk text is trimmed of surrounding whitespace; a document of only
//    whitespace has no chunks.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace ropeserve::service {

struct TokenSpan {
  std::size_t begin = 0;  // byte offsets into the document
  std::size_t end = 0;
};

struct TextChunk {
  std::size_t begin = 0;  // bytes of the document: text.substr(begin, end - begin)
  std::size_t end = 0;
  std::size_t first_token = 0;  // tokens [first_token, last_token) of the document
  std::size_t last_token = 0;
};

struct SplitOptions {
  std::size_t max_tokens = 1024;   // >= 2
  std::size_t overlap_tokens = 0;  // at most max_tokens / 4 (larger values are clamped there)
};

// How good a place byte offset `pos` of `text` is to cut at: 4 paragraph,
// 3 sentence, 2 line, 1 space, 0 none (inside a word or a symbol run).
int BoundaryRank(std::string_view text, std::size_t pos);

// `tokens` are the document's token spans in order (non-decreasing,
// within the text; special tokens left out).
std::vector<TextChunk> SplitDocument(std::string_view text, const std::vector<TokenSpan>& tokens,
                                     const SplitOptions& options);

}  // namespace ropeserve::service
