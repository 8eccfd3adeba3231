// The stages of a Hugging Face tokenizer pipeline, each built from its JSON
// object in tokenizer.json:
//   text -> added tokens split off -> Normalizer -> PreTokenizer -> Model
//        -> PostProcessor -> Encoding;  ids -> tokens -> Decoder -> text.
// Offsets inside the pipeline are byte offsets; the Tokenizer converts them
// to code-point offsets of the original text before post-processing, as
// the reference does.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/common/status.h"
#include "server/common/token_id.h"
#include "server/tokenizer/normalized_string.h"

namespace ropeserve::tok {

struct Token {
  TokenId id;
  Offsets offsets;  // bytes of the word the model was given
};

struct Split {
  NormalizedString normalized;
  std::optional<std::vector<Token>> tokens;  // set once tokenized (or an added token)
};

class PreTokenizedString {
 public:
  std::vector<Split> splits;
  // Replaces every split that has no tokens yet by the pieces `fn` returns.
  template <typename Fn>
  Status SplitEach(Fn&& fn) {
    std::vector<Split> out;
    out.reserve(splits.size());
    for (size_t i = 0; i < splits.size(); ++i) {
      if (splits[i].tokens) {
        out.push_back(std::move(splits[i]));
        continue;
      }
      RS_ASSIGN_OR_RETURN(std::vector<NormalizedString> pieces, fn(i, std::move(splits[i].normalized)));
      for (auto& p : pieces) {
        if (!p.empty()) out.push_back({std::move(p), std::nullopt});
      }
    }
    splits = std::move(out);
    return Status::Ok();
  }
};

// The result of encoding: parallel arrays, one entry per token.
struct Encoding {
  std::vector<TokenId> ids;
  std::vector<std::uint32_t> type_ids;
  std::vector<std::string> tokens;
  std::vector<Offsets> offsets;  // code points of the original text
  std::vector<std::uint8_t> special_tokens_mask;
  std::vector<int> sequence_ids;  // 0 / 1 for the input sequence, -1 for added specials
  // The word (pre-tokenizer split) of each token within its sequence, -1 for
  // added specials: the reference's Encoding::words / token_to_word.
  std::vector<std::int64_t> words;
  std::vector<Encoding> overflowing;

  size_t size() const { return ids.size(); }
  // Appends `other`'s tokens (not its overflow).
  void Append(const Encoding& other);
  // The reference's merge_with: appends `pair` and combines overflowing
  // windows (each of ours with `pair` and its windows, then us with each of
  // `pair`'s windows), recursively, so the nesting matches the reference.
  void MergeWith(const Encoding& pair);
  static Encoding Merge(std::vector<Encoding> encodings);
  // Tokens [start, end) as a new encoding (no overflow).
  Encoding Range(size_t start, size_t end) const;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual Status Normalize(NormalizedString& s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual Status PreTokenize(PreTokenizedString& s) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the tokens of one pre-token.
  virtual Status Tokenize(const std::string& word, std::vector<Token>* out) const = 0;
  virtual std::optional<TokenId> TokenToId(const std::string& token) const = 0;
  virtual const std::string* IdToToken(TokenId id) const = 0;
  virtual size_t VocabSize() const = 0;
  // WordPiece's "##" (or a BPE's continuing_subword_prefix): tokens that
  // continue a word carry it. Empty when the model has none.
  virtual const std::string& ContinuingSubwordPrefix() const {
    static const std::string kNone;
    return kNone;
  }
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual size_t AddedTokens(bool is_pair) const = 0;
  // Transforms the list of encodings (one per input sequence, or pieces of
  // a template); the Tokenizer merges the result, as the reference does.
  virtual StatusOr<std::vector<Encoding>> ProcessEncodings(std::vector<Encoding> encodings,
                                                           bool add_special_tokens) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual Status DecodeChain(std::vector<std::string>& tokens) const = 0;
  // One token's contribution to a decode in the middle of a sequence, as
  // raw bytes (before UTF-8 repair: a byte-level token may hold part of a
  // character). Effects at the start of a decode (Strip, Metaspace's first
  // space) do not apply. Default: the token unchanged.
  virtual void TokenBytes(std::string& /*token*/) const {}
};

// Factories. Errors name the component and field ("normalizer: unknown type
// 'Foo'"), so that an unsupported tokenizer.json fails at load time.
StatusOr<std::unique_ptr<Normalizer>> MakeNormalizer(const nlohmann::json& j);
StatusOr<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const nlohmann::json& j);
StatusOr<std::unique_ptr<Model>> MakeModel(const nlohmann::json& j);
StatusOr<std::unique_ptr<PostProcessor>> MakePostProcessor(const nlohmann::json& j);
StatusOr<std::unique_ptr<Decoder>> MakeDecoder(const nlohmann::json& j);

// GPT-2's byte <-> printable character mapping used by byte-level BPE.
char32_t ByteToChar(std::uint8_t b);
// -1 if `c` is not one of the 256 byte characters.
int CharToByte(char32_t c);

}  // namespace ropeserve::tok
