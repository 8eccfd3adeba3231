#include "server/structured/grammar.h"

#include <algorithm>
#include <limits>
#include <numeric>
#ifdef _OPENMP
#include <omp.h>
#endif

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
    if (by_id_[i] && !by_id_[i]->empty() && by_id_[i]->size() <= kMaxTokenBytes)
      order.push_back(static_cast<TokenId>(i));
  std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    const auto& x = *by_id_[static_cast<std::size_t>(a)];
    const auto& y = *by_id_[static_cast<std::size_t>(b)];
    return x != y ? x < y : a < b;
  });
  // The trie, in depth-first order: a token's bytes past its common prefix
  // with the previous token (in sorted order) are new nodes; a node's
  // subtree ends where the next token leaves its prefix.
  std::vector<std::uint32_t> path;  // the nodes of the current prefix
  const std::string* prev = nullptr;
  auto close_to = [&](std::size_t depth) {
    while (path.size() > depth) {
      subtree_end_[path.back()] = static_cast<std::uint32_t>(byte_.size());
      path.pop_back();
    }
  };
  for (TokenId id : order) {
    const std::string& bytes = *by_id_[static_cast<std::size_t>(id)];
    std::size_t common = 0;
    if (prev != nullptr)
      while (common < prev->size() && common < bytes.size() && (*prev)[common] == bytes[common]) ++common;
    prev = &bytes;
    close_to(common);
    for (std::size_t k = common; k < bytes.size(); ++k) {
      parent_.push_back(path.empty() ? kNoParent : path.back());
      path.push_back(static_cast<std::uint32_t>(byte_.size()));
      byte_.push_back(static_cast<std::uint8_t>(bytes[k]));
      depth_.push_back(static_cast<std::uint16_t>(k));
      subtree_end_.push_back(0);
      token_begin_.push_back(static_cast<std::uint32_t>(token_ids_.size()));
    }
    // Sorted order puts equal byte strings together, so the token's node
    // is the last one made: ids stay grouped by node.
    token_ids_.push_back(id);
    max_len_ = std::max(max_len_, bytes.size());
    if (bytes.size() == 1) single_.set(static_cast<unsigned char>(bytes[0]));
  }
  close_to(0);
  token_begin_.push_back(static_cast<std::uint32_t>(token_ids_.size()));
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

bool TokenMask::Allows(TokenId id) const { return std::binary_search(ids.begin(), ids.end(), id) == allow_list; }

void TokenMask::Apply(std::span<float> logits) const { ApplyTokenMask(logits, allow_list, ids); }

// ------------------------------------------------------------ grammar

CompiledGrammar::CompiledGrammar(Dfa dfa, std::shared_ptr<const TokenVocabulary> vocab,
                                 std::shared_ptr<MaskMemory> shared)
    : dfa_(std::move(dfa)), vocab_(std::move(vocab)), shared_(std::move(shared)) {
  distance_ = dfa_.DistancesToAccept(vocab_->single_bytes());
}

CompiledGrammar::~CompiledGrammar() {
  if (shared_) shared_->used -= cached_bytes_;
}

StatusOr<std::shared_ptr<CompiledGrammar>> CompiledGrammar::Compile(const Constraint& c,
                                                                    std::shared_ptr<const TokenVocabulary> vocab,
                                                                    std::shared_ptr<MaskMemory> shared) {
  auto fail = [&](const Status& s) { return c.param.empty() ? s : s.WithParam(c.param); };
  auto expr = ConstraintExpr(c);
  if (!expr.ok()) return fail(expr.status());
  auto dfa = Dfa::Compile(*expr);
  if (!dfa.ok()) return fail(dfa.status());
  return std::shared_ptr<CompiledGrammar>(new CompiledGrammar(std::move(*dfa), std::move(vocab), std::move(shared)));
}

std::int32_t CompiledGrammar::Advance(std::int32_t state, TokenId token) const {
  if (state == Dfa::kDead) return Dfa::kDead;
  const auto& bytes = vocab_->Bytes(token);
  if (!bytes || bytes->empty()) return Dfa::kDead;
  return dfa_.Walk(state, *bytes);
}

// The trie's nodes [from, to) walked from `state`: a node whose byte has
// no transition is skipped with its whole subtree. Marks the allowed ids; returns how many and the largest distance
// after one.
std::pair<std::size_t, std::int32_t> CompiledGrammar::WalkSlice(std::int32_t state, std::int32_t budget,
                                                                std::size_t from, std::size_t to,
                                                                std::uint8_t* mark) const {
  const TokenVocabulary& v = *vocab_;
  std::size_t allowed = 0;
  std::int32_t max_after = 0;
  std::vector<std::int32_t> st(v.max_len_ + 1, Dfa::kDead);  // st[d]: the state after the node's first d bytes
  st[0] = state;
  // A slice may start inside a subtree: its ancestors' states first (and if
  // one of them has no transition, the walk resumes after its subtree).
  std::vector<std::uint32_t> chain;
  for (std::uint32_t a = from < to ? v.parent_[from] : TokenVocabulary::kNoParent; a != TokenVocabulary::kNoParent;
       a = v.parent_[a])
    chain.push_back(a);
  std::size_t n = from;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const std::int32_t s = dfa_.Next(st[v.depth_[*it]], v.byte_[*it]);
    if (s == Dfa::kDead) {
      n = v.subtree_end_[*it];
      break;
    }
    st[v.depth_[*it] + 1] = s;
  }
  while (n < to) {
    const std::size_t d = v.depth_[n];
    const std::int32_t s = dfa_.Next(st[d], v.byte_[n]);
    if (s == Dfa::kDead) {
      n = v.subtree_end_[n];
      continue;
    }
    st[d + 1] = s;
    const std::int32_t dist = distance_[static_cast<std::size_t>(s)];
    if (v.token_begin_[n] != v.token_begin_[n + 1] && (budget == kNoBudget || dist <= budget)) {
      for (std::uint32_t t = v.token_begin_[n]; t < v.token_begin_[n + 1]; ++t) {
        mark[static_cast<std::size_t>(v.token_ids_[t])] = 1;
        ++allowed;
      }
      max_after = std::max(max_after, dist);
    }
    ++n;
  }
  return {allowed, max_after};
}

TokenMask CompiledGrammar::ComputeMask(std::int32_t state, std::int32_t budget) const {
  const TokenVocabulary& v = *vocab_;
  // Allowed ids marked in a table over the vocabulary (the walk visits them
  // in byte order, not id order).
  thread_local std::vector<std::uint8_t> mark;
  mark.assign(v.logits_size(), 0);
  std::size_t allowed = 0;
  std::int32_t max_after = 0;
  // Equal slices of the trie's nodes walked in parallel:
  // tokens are distinct, so the marks never collide. The walk is what a
  // new automaton state costs, and the step's cores are idle while the
  // runner samples.
  const std::size_t nodes = v.byte_.size();
  int threads = 1;
#ifdef _OPENMP
  threads = std::clamp(omp_get_max_threads(), 1, 8);
#endif
  const auto slices = std::clamp<std::size_t>(nodes / 65536, 1, static_cast<std::size_t>(threads));
  std::vector<std::size_t> cuts;
  for (std::size_t c = 0; c <= slices; ++c) cuts.push_back(nodes * c / slices);
  std::vector<std::pair<std::size_t, std::int32_t>> part(slices);
  std::uint8_t* marks = mark.data();
#ifdef _OPENMP
#pragma omp parallel for num_threads(static_cast <int>(slices)) schedule(static, 1) if (slices > 1)
#endif
  for (std::size_t c = 0; c < slices; ++c) part[c] = WalkSlice(state, budget, cuts[c], cuts[c + 1], marks);
  for (const auto& [a, m] : part) {
    allowed += a;
    max_after = std::max(max_after, m);
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
    auto it = masks_.find(key(state, b));
    if (it != masks_.end()) return it->second;  // another thread was first
    const std::size_t size = m->bytes();
    if (cached_bytes_ + size > kMaxCachedBytes) return m;
    if (shared_ && shared_->used.fetch_add(size) + size > shared_->limit) {
      shared_->used -= size;
      return m;
    }
    cached_bytes_ += size;
    masks_.emplace(key(state, b), m);
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

std::shared_ptr<const TokenMask> GrammarProcessor::Next(std::span<const TokenId> generated) {
  if (generated.size() < consumed_) {
    consumed_ = 0;
    state_ = grammar_->start();
  }
  for (; consumed_ < generated.size(); ++consumed_) state_ = grammar_->Advance(state_, generated[consumed_]);
  if (state_ == Dfa::kDead) {
    // Only after a token the mask forbade (it cannot be sampled at -inf):
    // end the sequence.
    auto eos = std::make_shared<TokenMask>(TokenMask{true, grammar_->vocab().eos(), 0});
    std::sort(eos->ids.begin(), eos->ids.end());
    return eos;
  }
  std::int32_t budget = CompiledGrammar::kNoBudget;
  if (enforce_budget_) {
    // Tokens that may follow this one, keeping the last for EOS (-1 on the
    // last step: only EOS).
    const std::int64_t left = max_tokens_ - static_cast<std::int64_t>(generated.size()) - 2;
    budget = static_cast<std::int32_t>(std::clamp<std::int64_t>(left, -1, CompiledGrammar::kNoBudget - 1));
  }
  return grammar_->Mask(state_, budget);
}

void GrammarProcessor::Process(std::span<const TokenId> generated, std::span<float> logits) {
  Next(generated)->Apply(logits);
}

void GrammarProcessor::Describe(std::span<const TokenId> generated, LogitsEdit& edit) {
  std::shared_ptr<const TokenMask> mask = Next(generated);
  edit = LogitsEdit{};
  edit.masked = true;
  edit.allow_list = mask->allow_list;
  edit.ids = mask->ids;
  edit.keep = std::move(mask);
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
  RS_ASSIGN_OR_RETURN(auto g, CompiledGrammar::Compile(c, vocab_, masks_));
  std::lock_guard<std::mutex> lock(mu_);
  lru_.emplace_front(key, g);
  std::size_t tables = 0;
  for (const auto& [k, e] : lru_) tables += e->table_bytes();
  while (lru_.size() > 1 && (lru_.size() > max_entries_ || tables > kMaxTableBytes)) {
    tables -= lru_.back().second->table_bytes();
    lru_.pop_back();  // requests still running keep theirs alive
  }
  return std::shared_ptr<const CompiledGrammar>(g);
}

}  // namespace ropeserve::structured
