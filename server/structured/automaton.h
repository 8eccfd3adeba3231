// Regular languages over bytes: an expression tree built by combinators
// (the regex parser and the JSON Schema compiler both produce one), and the
// deterministic automaton compiled from it. Torch-free and tokenizer-free:
// the token level (grammar.h) walks this automaton with each token's bytes.
//
// Written here because no Debian package compiles a regular language into
// an automaton whose states can be stepped byte by byte and inspected
// (RE2 and Oniguruma match strings; they do not expose their automata).
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"

namespace ropeserve::structured {

using ByteSet = std::bitset<256>;

// An immutable expression; copies share the tree.
class Expr {
 public:
  enum class Kind { kBytes, kSeq, kAlt, kRepeat, kSepBy };
  static constexpr int kUnbounded = -1;

  // One byte from `set` (an empty set matches nothing).
  static Expr Bytes(const ByteSet& set);
  static Expr Byte(unsigned char b);
  static Expr Literal(std::string_view bytes);  // "" = the empty string
  static Expr Empty() { return Seq({}); }
  static Expr Nothing() { return Bytes(ByteSet()); }
  static Expr Seq(std::vector<Expr> parts);
  static Expr Alt(std::vector<Expr> options);
  // `e` repeated min..max times (max = kUnbounded for no limit).
  static Expr Repeat(Expr e, int min, int max);
  static Expr Optional(Expr e) { return Repeat(std::move(e), 0, 1); }
  // item (sep item)*, between min and max items (max = kUnbounded): the
  // item's automaton is built once and looped, not copied per item.
  static Expr SepBy(Expr item, Expr sep, int min, int max);

  Kind kind() const;

  struct Node;  // defined in automaton.cc

 private:
  friend class NfaBuilder;
  explicit Expr(std::shared_ptr<const Node> n) : node_(std::move(n)) {}
  std::shared_ptr<const Node> node_;
};

struct AutomatonLimits {
  std::size_t max_nfa_nodes = 200000;
  std::size_t max_dfa_states = 20000;
};

// A deterministic automaton over bytes with only live states: every state
// can still reach acceptance, and a transition that could not is kDead.
class Dfa {
 public:
  static constexpr std::int32_t kDead = -1;

  // InvalidArgument when the language is empty ("cannot be satisfied") or
  // the automaton exceeds `limits` ("too complex").
  static StatusOr<Dfa> Compile(const Expr& e, const AutomatonLimits& limits = {});

  std::int32_t start() const { return 0; }
  std::int32_t Next(std::int32_t s, unsigned char b) const {
    return next_[static_cast<std::size_t>(s) * num_classes_ + byte_class_[b]];
  }
  // kDead as soon as a byte has no transition.
  std::int32_t Walk(std::int32_t s, std::string_view bytes) const;
  bool Accepting(std::int32_t s) const { return accepting_[static_cast<std::size_t>(s)]; }
  // Whether any byte leads on from `s`.
  bool HasExits(std::int32_t s) const;
  std::size_t num_states() const { return accepting_.size(); }
  // Whether `bytes` is in the language.
  bool Matches(std::string_view bytes) const;
  // What the tables take.
  std::size_t memory_bytes() const { return next_.capacity() * sizeof(std::int32_t) + accepting_.size() / 8 + 512; }

  // For every state, the fewest bytes from `usable` that reach an accepting
  // state (kUnreachable if none do).
  static constexpr std::int32_t kUnreachable = INT32_MAX;
  std::vector<std::int32_t> DistancesToAccept(const ByteSet& usable) const;

 private:
  std::vector<std::uint16_t> byte_class_ = std::vector<std::uint16_t>(256, 0);
  std::size_t num_classes_ = 1;
  std::vector<std::int32_t> next_;  // [state * num_classes + class]
  std::vector<bool> accepting_;
};

}  // namespace ropeserve::structured
