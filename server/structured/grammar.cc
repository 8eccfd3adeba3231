#include "server/structured/grammar.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "server/tokenizer/tokenizer.h"

namespace ropeserve::structured {

// ------------------------------------------------------------ vocabulary

TokenVocabulary::TokenVocabulary(std::vector<std::optional<std::string>> by_id, std::size_t logits_size,
                                 std::vector<TokenId> eos)
    : by_id_(std::move(by_id)), logits_size_(logits_size), eos_(std::move(eos)) {
  if (by_id_.size() > logits_size_) by_id_.resize(logits_size_);
  for (TokenId e : eos_)
    if (e >= 0 && static_cast<std::size_t>(e) < by_id_.size()) by_id_[static_cast<std::size_t>(e)].reset();
  std::vector<TokenId> order;
  for (std::size_t i = 0; i < by_id_.size(); ++i)
    if (by_id_[i] && !by_id_[i]->empty()) order.push_back(static_cast<TokenId>(i));
  std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    const auto& x = *by_id_[static_cast<std::size_t>(a)];
    const auto& y = *by_id_[static_cast<std::size_t>(b)];
    return x != y ? x < y : a < b;
  });
  offset_.push_back(0);
  const std::string* prev = nullptr;
  for (TokenId id : order) {
    const std::string& bytes = *by_id_[static_cast<std::size_t>(id)];
    std::uint32_t common = 0;
    if (prev != nullptr)
      while (common < prev->size() && common < bytes.size() && (*prev)[common] == bytes[common]) ++common;
    prev = &bytes;
    lcp_.push_back(common);
    blob_ += bytes;
    offset_.push_back(static_cast<std::uint32_t>(blob_.size()));
    sorted_ids_.push_back(id);
    max_len_ = std::max(max_len_, bytes.size());
    if (bytes.size() == 1) single_.set(static_cast<unsigned char>(bytes[0]));
  }
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTokenizer(const tok::Tokenizer& t, std::size_t logits_size,
                                                                      std::vector<TokenId> eos) {
  std::vector<std::optional<std::string>> by_id(std::min(t.VocabSize(), logits_size));
  for (std::size_t i = 0; i < by_id.size(); ++i) by_id[i] = t.TokenBytes(static_cast<std::uint32_t>(i));
  return std::make_shared<const TokenVocabulary>(std::move(by_id), logits_size, std::move(eos));
}

bool TokenVocabulary::IsEos(TokenId id) const { return std::find(eos_.begin(), eos_.end(), id) != eos_.end(); }

const std::optional<std::string>& TokenVocabulary::Bytes(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= by_id_.size()) return none_;
  return by_id_[static_cast<std::size_t>(id)];
}

// ------------------------------------------------------------ masks

bool TokenMask::Allows(TokenId id) const {
  return std::binary_search(ids.begin(), ids.end(), id) == allow_list;
}

void TokenMask::Apply(std::span<float> logits) const {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (!allow_list) {
    for (TokenId id : ids)
      if (static_cast<std::size_t>(id) < logits.size()) logits[static_cast<std::size_t>(id)] = kNegInf;
    return;
  }
  // Keep the allowed values, forbid everything, put them back.
  thread_local std::vector<float> kept;
  kept.resize(ids.size());
  for (std::size_t k = 0; k < ids.size(); ++k)
    kept[k] = static_cast<std::size_t>(ids[k]) < logits.size() ? logits[static_cast<std::size_t>(ids[k])] : kNegInf;
  std::fill(logits.begin(), logits.end(), kNegInf);
  for (std::size_t k = 0; k < ids.size(); ++k)
    if (static_cast<std::size_t>(ids[k]) < logits.size()) logits[static_cast<std::size_t>(ids[k])] = kept[k];
}

// ------------------------------------------------------------ grammar

CompiledGrammar::CompiledGrammar(Dfa dfa, std::shared_ptr<const TokenVocabulary> vocab)
    : dfa_(std::move(dfa)), vocab_(std::move(vocab)) {
  distance_ = dfa_.DistancesToAccept(vocab_->single_bytes());
}

StatusOr<std::shared_ptr<CompiledGrammar>> CompiledGrammar::Compile(const Constraint& c,
                                                                   std::shared_ptr<const TokenVocabulary> vocab) {
  auto fail = [&](const Status& s) { return c.param.empty() ? s : s.WithParam(c.param); };
  auto expr = ConstraintExpr(c);
  if (!expr.ok()) return fail(expr.status());
  auto dfa = Dfa::Compile(*expr);
  if (!dfa.ok()) return fail(dfa.status());
  return std::shared_ptr<CompiledGrammar>(new CompiledGrammar(std::move(*dfa), std::move(vocab)));
}

std::int32_t CompiledGrammar::Advance(std::int32_t state, TokenId token) const {
  if (state == Dfa::kDead) return Dfa::kDead;
  const auto& bytes = vocab_->Bytes(token);
  if (!bytes || bytes->empty()) return Dfa::kDead;
  return dfa_.Walk(state, *bytes);
}

TokenMask CompiledGrammar::ComputeMask(std::int32_t state, std::int32_t budget) const {
  const TokenVocabulary& v = *vocab_;
  // Allowed ids marked in a table over the vocabulary (the walk visits them
  // in byte order, not id order).
  thread_local std::vector<std::uint8_t> mark;
  mark.assign(v.logits_size(), 0);
  std::size_t allowed = 0;
  std::int32_t max_after = 0;
  std::vector<std::int32_t> st(v.max_len_ + 1, Dfa::kDead);
  st[0] = state;
  std::size_t valid = 0;  // st[0..valid] hold the states of the current token's prefix
  const char* blob = v.blob_.data();
  const std::size_t n = v.sorted_ids_.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t begin = v.offset_[i], len = v.offset_[i + 1] - begin;
    valid = std::min<std::size_t>(valid, v.lcp_[i]);
    std::size_t k = valid;
    std::int32_t s = st[k];
    while (s != Dfa::kDead && k < len) {
      s = dfa_.Next(s, static_cast<unsigned char>(blob[begin + k]));
      st[++k] = s;
    }
    valid = k;
    if (s == Dfa::kDead) continue;
    const std::int32_t d = distance_[static_cast<std::size_t>(s)];
    if (budget != kNoBudget && d > budget) continue;
    max_after = std::max(max_after, d);
    mark[static_cast<std::size_t>(v.sorted_ids_[i])] = 1;
    ++allowed;
  }
  if (dfa_.Accepting(state) || allowed == 0) {
    // EOS; also when nothing else is allowed (unreachable with a live
    // automaton): the sequence ends rather than stalls.
    for (TokenId e : v.eos()) {
      const auto id = static_cast<std::size_t>(e);
      if (id >= mark.size() || mark[id]) continue;
      mark[id] = 1;
      ++allowed;
    }
  }
  TokenMask m;
  m.max_distance_after = max_after;
  m.allow_list = allowed * 2 <= v.logits_size();
  m.ids.reserve(m.allow_list ? allowed : v.logits_size() - allowed);
  for (std::size_t id = 0; id < mark.size(); ++id)
    if ((mark[id] != 0) == m.allow_list) m.ids.push_back(static_cast<TokenId>(id));
  return m;
}

std::shared_ptr<const TokenMask> CompiledGrammar::Mask(std::int32_t state, std::int32_t budget) const {
  auto key = [](std::int32_t s, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(s)) << 32) | static_cast<std::uint32_t>(b);
  };
  auto lookup = [&](std::int32_t b) -> std::shared_ptr<const TokenMask> {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = masks_.find(key(state, b));
      if (it != masks_.end()) return it->second;
    }
    auto m = std::make_shared<const TokenMask>(ComputeMask(state, b));
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_bytes_ + m->bytes() <= kMaxCachedBytes) {
      auto [it, inserted] = masks_.emplace(key(state, b), m);
      if (inserted) cached_bytes_ += m->bytes();
      return it->second;
    }
    return m;
  };
  auto free = lookup(kNoBudget);
  if (budget == kNoBudget || budget >= free->max_distance_after) return free;
  return lookup(budget);
}

std::size_t CompiledGrammar::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

// ------------------------------------------------------------ processor

GrammarProcessor::GrammarProcessor(std::shared_ptr<const CompiledGrammar> grammar, std::int64_t max_tokens)
    : grammar_(std::move(grammar)), max_tokens_(max_tokens), state_(grammar_->start()) {
  // The budget rule needs the shortest output and EOS to fit; when they
  // cannot (a schema longer than max_tokens single-byte tokens), the sequence is
  // constrained without it and may end by length.
  enforce_budget_ = static_cast<std::int64_t>(grammar_->Distance(state_)) + 1 <= max_tokens_;
}

void GrammarProcessor::Process(std::span<const TokenId> generated, std::span<float> logits) {
  if (generated.size() < consumed_) {
    consumed_ = 0;
    state_ = grammar_->start();
  }
  for (; consumed_ < generated.size(); ++consumed_) state_ = grammar_->Advance(state_, generated[consumed_]);
  if (state_ == Dfa::kDead) {
    // Only after a token the mask forbade (it cannot be sampled at -inf):
    // end the sequence.
    TokenMask eos{true, grammar_->vocab().eos(), 0};
    std::sort(eos.ids.begin(), eos.ids.end());
    eos.Apply(logits);
    return;
  }
  std::int32_t budget = CompiledGrammar::kNoBudget;
  if (enforce_budget_) {
    // Tokens that may follow this one, keeping the last for EOS (-1 on the
    // last step: only EOS).
    const std::int64_t left = max_tokens_ - static_cast<std::int64_t>(generated.size()) - 2;
    budget = static_cast<std::int32_t>(std::clamp<std::int64_t>(left, -1, CompiledGrammar::kNoBudget - 1));
  }
  grammar_->Mask(state_, budget)->Apply(logits);
}

// ------------------------------------------------------------ compiler cache

GrammarCompiler::GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocab, std::size_t max_entries)
    : vocab_(std::move(vocab)), max_entries_(std::max<std::size_t>(max_entries, 1)) {}

StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::Get(const Constraint& c) {
  const std::string key = c.CacheKey();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->first == key) {
        lru_.splice(lru_.begin(), lru_, it);
        return lru_.front().second;
      }
    }
  }
  // Compiled outside the lock: a slow schema does not hold up the others.
  RS_ASSIGN_OR_RETURN(auto g, CompiledGrammar::Compile(c, vocab_));
  std::lock_guard<std::mutex> lock(mu_);
  lru_.emplace_front(key, g);
  while (lru_.size() > max_entries_) lru_.pop_back();
  return std::shared_ptr<const CompiledGrammar>(g);
}

}  // namespace ropeserve::structured
