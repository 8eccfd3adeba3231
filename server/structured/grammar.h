// Constrained decoding at the token level: the model's vocabulary as byte
// strings, a compiled constraint (a byte automaton plus per-state token
// masks, computed once per state and cached), and the logits processor
// that keeps one sequence inside the language.
//
// Masks. A token is allowed in automaton state s when its bytes lead from s
// to a live state; EOS is allowed when s accepts. The walk goes down a trie
// of the vocabulary's bytes: each prefix is stepped once, and a prefix
// without a transition skips every token that starts with it.
//
// Budget. A sequence must finish within max_tokens, EOS included: with b
// tokens left after this one and the EOS, a token is allowed only if the
// automaton can still accept in at most b more tokens, bounded by the distance in single-byte tokens (every
// byte-level vocabulary has them). This is what makes the output of any
// model (even random weights) complete and valid when max_tokens allows the
// shortest valid output.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/common/status.h"
#include "server/common/token_id.h"
#include "server/sampler/sampling.h"
#include "server/structured/automaton.h"
#include "server/structured/constraint.h"

namespace ropeserve::tok {
class Tokenizer;
}

namespace ropeserve::structured {

// The vocabulary as the automata see it.
class TokenVocabulary {
 public:
  // by_id[i]: the bytes of token i (nullopt: never allowed); logits rows
  // have `logits_size` entries (models may have more rows than tokens);
  // `eos` end the sequence.
  TokenVocabulary(std::vector<std::optional<std::string>> by_id, std::size_t logits_size, std::vector<TokenId> eos);
  static std::shared_ptr<const TokenVocabulary> FromTokenizer(const tok::Tokenizer& t, std::size_t logits_size,
                                                              std::vector<TokenId> eos);

  std::size_t logits_size() const { return logits_size_; }
  const std::vector<TokenId>& eos() const { return eos_; }
  bool IsEos(TokenId id) const;
  const std::optional<std::string>& Bytes(TokenId id) const;
  // Longer tokens (none in real vocabularies) are never allowed.
  static constexpr std::size_t kMaxTokenBytes = 4096;
  // Bytes that some token consists of alone.
  const ByteSet& single_bytes() const { return single_; }

 private:
  friend class CompiledGrammar;
  std::vector<std::optional<std::string>> by_id_;
  // The tokens' bytes as a trie in depth-first order, one array per field
  // (the walk reads them in order): node n is byte_[n] at depth_[n] (its
  // byte's index in the token), its subtree is [n, subtree_end_[n]), and
  // the tokens that end there are token_ids_[token_begin_[n],
  // token_begin_[n + 1]).
  std::vector<std::uint8_t> byte_;
  std::vector<std::uint16_t> depth_;
  std::vector<std::uint32_t> subtree_end_;
  std::vector<std::uint32_t> token_begin_;  // one more entry than nodes
  std::vector<std::uint32_t> parent_;       // kNoParent for the root's children
  static constexpr std::uint32_t kNoParent = UINT32_MAX;
  std::vector<TokenId> token_ids_;
  std::size_t max_len_ = 0;
  std::size_t logits_size_;
  std::vector<TokenId> eos_;
  ByteSet single_;
  std::optional<std::string> none_;
};

// Which tokens may come next: a list of allowed ids, or of the ids to
// forbid (whichever is shorter).
struct TokenMask {
  bool allow_list = true;
  std::vector<TokenId> ids;  // sorted
  // The largest distance-to-accept after an allowed token: budgets at or
  // above it change nothing.
  std::int32_t max_distance_after = 0;

  bool Allows(TokenId id) const;
  // Forbidden logits become -inf.
  void Apply(std::span<float> logits) const;
  std::size_t bytes() const { return ids.capacity() * sizeof(TokenId) + sizeof(*this); }
};

// Bytes of cached masks, shared by the grammars of one compiler: a mask is
// cached only while its grammar's share and the total stay within bounds.
struct MaskMemory {
  explicit MaskMemory(std::size_t l) : limit(l) {}
  const std::size_t limit;
  std::atomic<std::size_t> used{0};
};

class CompiledGrammar {
 public:
  static constexpr std::int32_t kNoBudget = INT32_MAX;

  static StatusOr<std::shared_ptr<CompiledGrammar>> Compile(const Constraint& c,
                                                            std::shared_ptr<const TokenVocabulary> vocab,
                                                            std::shared_ptr<MaskMemory> shared = nullptr);
  ~CompiledGrammar();

  std::int32_t start() const { return dfa_.start(); }
  // The state after `token` (Dfa::kDead for EOS, special tokens, or a
  // token the language does not allow here).
  std::int32_t Advance(std::int32_t state, TokenId token) const;
  bool Accepting(std::int32_t state) const { return dfa_.Accepting(state); }
  // Fewest tokens that can still finish from `state` (an upper bound).
  std::int32_t Distance(std::int32_t state) const { return distance_[static_cast<std::size_t>(state)]; }
  // The tokens allowed in `state` when at most `budget` tokens may follow
  // (kNoBudget: any number). Cached, up to a memory bound per grammar.
  std::shared_ptr<const TokenMask> Mask(std::int32_t state, std::int32_t budget) const;

  const TokenVocabulary& vocab() const { return *vocab_; }
  const Dfa& dfa() const { return dfa_; }
  std::size_t cached_bytes() const;
  // The automaton and its distances (masks not included).
  std::size_t table_bytes() const { return dfa_.memory_bytes() + distance_.capacity() * sizeof(std::int32_t); }

  static constexpr std::size_t kMaxCachedBytes = std::size_t{32} << 20;

 private:
  CompiledGrammar(Dfa dfa, std::shared_ptr<const TokenVocabulary> vocab, std::shared_ptr<MaskMemory> shared);
  TokenMask ComputeMask(std::int32_t state, std::int32_t budget) const;
  std::pair<std::size_t, std::int32_t> WalkSlice(std::int32_t state, std::int32_t budget, std::size_t from,
                                                 std::size_t to, std::uint8_t* mark) const;

  Dfa dfa_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::vector<std::int32_t> distance_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::uint64_t, std::shared_ptr<const TokenMask>> masks_;
  mutable std::size_t cached_bytes_ = 0;
  std::shared_ptr<MaskMemory> shared_;  // may be null
};

// Keeps one sequence inside the grammar: called before each sampling step
// with the tokens generated so far (it follows them incrementally, and
// replays them from the start if they were rewound).
class GrammarProcessor final : public LogitsProcessor {
 public:
  GrammarProcessor(std::shared_ptr<const CompiledGrammar> grammar, std::int64_t max_tokens);
  void Process(std::span<const TokenId> generated, std::span<float> logits) override;
  // Its mask as an edit (a device applies it as a token bitmask).
  bool Describable() const override { return true; }
  void Describe(std::span<const TokenId> generated, LogitsEdit& edit) override;

 private:
  // The mask after `generated` (shared with the grammar's cache).
  std::shared_ptr<const TokenMask> Next(std::span<const TokenId> generated);

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::int64_t max_tokens_;
  bool enforce_budget_;
  std::size_t consumed_ = 0;
  std::int32_t state_;
};

// Compiles constraints for one vocabulary and keeps the most recently used
// ones (by CacheKey): at most `max_entries`, their automata within
// kMaxTableBytes (the newest always kept), their cached masks within
// kMaxMaskBytes in all. Thread-safe.
class GrammarCompiler {
 public:
  static constexpr std::size_t kMaxTableBytes = std::size_t{256} << 20;
  static constexpr std::size_t kMaxMaskBytes = std::size_t{256} << 20;
  explicit GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocab, std::size_t max_entries = 32);
  // InvalidArgument naming the constraint's field when it cannot be compiled.
  StatusOr<std::shared_ptr<const CompiledGrammar>> Get(const Constraint& c);
  const TokenVocabulary& vocab() const { return *vocab_; }

 private:
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::size_t max_entries_;
  std::shared_ptr<MaskMemory> masks_ = std::make_shared<MaskMemory>(kMaxMaskBytes);
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru_;  // most recent first
};

}  // namespace ropeserve::structured
