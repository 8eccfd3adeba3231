// A Hugging Face tokenizer.json, loaded and run in C++ with the reference
// library's semantics (ids, code-point offsets, decoding). See
// docs/tokenizer.md for what is supported and the bad-input policy.
//
// Thread safety: a loaded Tokenizer is immutable and may be shared by any
// number of threads (the BPE word cache is internally locked).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "server/common/status.h"
#include "server/tokenizer/components.h"

namespace ropeserve::tok {

struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

enum class TruncationStrategy { kLongestFirst, kOnlyFirst, kOnlySecond };
enum class TruncationDirection { kRight, kLeft };

struct Truncation {
  size_t max_length = 0;
  size_t stride = 0;
  TruncationStrategy strategy = TruncationStrategy::kLongestFirst;
  TruncationDirection direction = TruncationDirection::kRight;
  // Most windows (the encoding and its overflowing ones) one sequence may
  // be split into; more is an error, raised before they are built. 0 = only
  // the built-in bound on their total tokens.
  size_t max_windows = 0;
};

// What tokenizer_config.json / special_tokens_map.json add.
struct TokenizerConfig {
  std::optional<std::string> chat_template;  // the default template
  std::unordered_map<std::string, std::string> named_templates;
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token, cls_token, sep_token;
};

// Reads a tokenizer_config.json: chat template(s) and special tokens
// (given as "text" or {"content": "text"}). NotFound / InvalidArgument
// naming the file.
StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::string& path);

class Tokenizer {
 public:
  // `path` is a tokenizer.json or a directory holding one (plus optional
  // tokenizer_config.json and special_tokens_map.json).
  static StatusOr<std::shared_ptr<const Tokenizer>> FromPath(const std::string& path);
  // From the parsed tokenizer.json (and optional tokenizer_config.json).
  static StatusOr<std::shared_ptr<const Tokenizer>> FromJson(const std::string& tokenizer_json,
                                                             const std::string& config_json = "");

  // Invalid UTF-8 is rejected (InvalidArgument), never replaced.
  StatusOr<Encoding> Encode(std::string_view text, bool add_special_tokens) const;
  // With `truncation` instead of tokenizer.json's own (the special tokens
  // stay; the text's tokens are cut, as the reference's
  // `truncation=True, max_length=...`).
  StatusOr<Encoding> Encode(std::string_view text, bool add_special_tokens, const Truncation& truncation) const;
  // Question/context pairs; `truncation` (if set) as with the reference's
  // `truncation=..., max_length=..., stride=...`: overflowing windows are
  // returned in Encoding::overflowing.
  StatusOr<Encoding> EncodePair(std::string_view first, std::string_view second, bool add_special_tokens,
                                const std::optional<Truncation>& truncation) const;
  // InvalidArgument for an id outside the vocabulary.
  StatusOr<std::string> Decode(const std::vector<TokenId>& ids, bool skip_special_tokens) const;
  // Token strings through the decoder: transformers'
  // convert_tokens_to_string (how its token-classification pipeline spells
  // an entity's word).
  StatusOr<std::string> DecodeTokens(std::vector<std::string> tokens) const;
  // The model's continuing_subword_prefix (WordPiece's "##"); empty for
  // models that do not mark word continuations.
  const std::string& ContinuingSubwordPrefix() const { return model_->ContinuingSubwordPrefix(); }
  // tokenizer_config.json's unk_token as an id (transformers'
  // unk_token_id); nullopt when it names none.
  std::optional<TokenId> UnkId() const;

  std::optional<TokenId> TokenToId(const std::string& token) const;
  const std::string* IdToToken(TokenId id) const;
  bool IsSpecial(TokenId id) const { return special_ids_.count(id) > 0; }
  // The bytes token `id` adds to a decode in the middle of a sequence
  // (Decoder::TokenBytes), or nullopt for special tokens and ids outside
  // the vocabulary. What constrained decoding walks its automata with.
  std::optional<std::string> TokenBytes(TokenId id) const;
  // A byte-fallback piece ("<0xE4>"): its text is only final once the
  // group of bytes it belongs to is complete.
  bool IsByteFallbackToken(TokenId id) const;
  // Bytes at the end of a decode that a later token may still rewrite
  // (WordPiece's cleanup rules reach back up to " do not").
  size_t DecodeHoldbackBytes() const { return decode_holdback_bytes_; }
  size_t VocabSize() const { return vocab_size_; }
  size_t NumAddedTokens(bool is_pair) const { return post_ ? post_->AddedTokens(is_pair) : 0; }
  const TokenizerConfig& config() const { return config_; }

 private:
  struct Piece {
    std::optional<TokenId> id;
    Offsets offsets;
  };
  struct Matcher {
    std::vector<const AddedToken*> by_first_byte[256];  // longest first
    bool empty() const;
  };
  std::vector<Piece> FindAdded(std::string_view s, const Matcher& m) const;
  Status ExtractAndNormalize(std::string_view text, PreTokenizedString* out) const;
  StatusOr<Encoding> EncodeSequence(std::string_view text, std::uint32_t type_id, int sequence_id) const;
  StatusOr<Encoding> PostProcess(Encoding a, std::optional<Encoding> b, bool add_special,
                                 const std::optional<Truncation>& truncation) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<PostProcessor> post_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;
  std::unordered_map<TokenId, const AddedToken*> added_by_id_;
  std::unordered_map<std::string, TokenId> added_by_content_;
  std::unordered_set<TokenId> special_ids_;
  Matcher raw_matcher_, normalized_matcher_;
  std::optional<Truncation> truncation_;
  size_t vocab_size_ = 0;
  size_t decode_holdback_bytes_ = 0;
  TokenizerConfig config_;
};

// Turns ids produced one at a time into text: every Push returns the new
// text that is final, and Finish the rest. The concatenation of everything
// returned equals Tokenizer::Decode(all ids), and no piece ends inside a
// UTF-8 character or a byte-fallback sequence: text that may still change
// is held back (a trailing U+FFFD, a trailing run of byte-fallback tokens,
// and the last few bytes for decoders with cleanup rules). Ids the
// tokenizer does not have decode to nothing (Hugging Face's decode skips
// them; models often have more embedding rows than the tokenizer has ids).
//
// Cost: each Push decodes a window of the last few ids twice, not the whole
// sequence. The new text is the difference between decoding the window with
// and without the new ids; effects at the window's start (Strip, Metaspace
// dropping the first space, a character split by the window edge) appear in
// both decodes and cancel.
class IncrementalDecoder {
 public:
  IncrementalDecoder(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens);
  StatusOr<std::string> Push(TokenId id);
  StatusOr<std::string> Finish();

 private:
  StatusOr<std::string> DecodeFrom(size_t start, size_t end) const;
  StatusOr<std::string> Emit(bool final);

  std::shared_ptr<const Tokenizer> tok_;
  bool skip_special_;
  std::vector<TokenId> ids_;
  size_t window_ = 0;           // the window starts at ids_[window_]
  size_t read_ = 0;             // ids_[..read_) have been turned into emitted text
  std::string base_;            // decode(ids_[window_, read_)) minus any held-back tail
  size_t base_emitted_ = 0;     // bytes of base_ already emitted
  bool in_byte_group_ = false;  // the last decoded token was a byte-fallback piece
};

}  // namespace ropeserve::tok
