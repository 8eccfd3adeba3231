#include "server/structured/automaton.h"

#include <algorithm>
#include <deque>
#include <map>
#include <unordered_set>

namespace ropeserve::structured {

struct Expr::Node {
  Kind kind = Kind::kSeq;
  ByteSet set;             // kBytes
  std::vector<Expr> kids;  // kSeq/kAlt: the parts; kRepeat: {e}; kSepBy: {item, sep}
  int min = 0, max = 0;    // kRepeat, kSepBy
};

namespace {
std::shared_ptr<Expr::Node> NewNode(Expr::Kind k) {
  auto n = std::make_shared<Expr::Node>();
  n->kind = k;
  return n;
}
}  // namespace

Expr Expr::Bytes(const ByteSet& set) {
  auto n = NewNode(Kind::kBytes);
  n->set = set;
  return Expr(std::move(n));
}

Expr Expr::Byte(unsigned char b) {
  ByteSet s;
  s.set(b);
  return Bytes(s);
}

Expr Expr::Literal(std::string_view bytes) {
  std::vector<Expr> parts;
  parts.reserve(bytes.size());
  for (char c : bytes) parts.push_back(Byte(static_cast<unsigned char>(c)));
  return Seq(std::move(parts));
}

Expr Expr::Seq(std::vector<Expr> parts) {
  if (parts.size() == 1) return parts[0];
  auto n = NewNode(Kind::kSeq);
  n->kids = std::move(parts);
  return Expr(std::move(n));
}

Expr Expr::Alt(std::vector<Expr> options) {
  if (options.size() == 1) return options[0];
  auto n = NewNode(Kind::kAlt);
  n->kids = std::move(options);
  return Expr(std::move(n));
}

Expr Expr::Repeat(Expr e, int min, int max) {
  auto n = NewNode(Kind::kRepeat);
  n->kids = {std::move(e)};
  n->min = std::max(min, 0);
  n->max = max;
  return Expr(std::move(n));
}

Expr Expr::SepBy(Expr item, Expr sep, int min, int max) {
  auto n = NewNode(Kind::kSepBy);
  n->kids = {std::move(item), std::move(sep)};
  n->min = std::max(min, 0);
  n->max = max;
  return Expr(std::move(n));
}

Expr::Kind Expr::kind() const { return node_->kind; }

// Thompson's construction: every NFA node has at most one byte transition
// (`set` -> `target`) and any number of empty ones.
class NfaBuilder {
 public:
  struct NfaNode {
    ByteSet set;
    std::int32_t target = -1;
    std::vector<std::int32_t> eps;
  };
  struct Fragment {
    std::int32_t start, end;
  };

  explicit NfaBuilder(std::size_t limit) : limit_(limit) {}
  std::vector<NfaNode> nodes;
  bool overflow = false;

  std::int32_t New() {
    if (nodes.size() >= limit_) {
      overflow = true;
      return 0;
    }
    nodes.emplace_back();
    return static_cast<std::int32_t>(nodes.size() - 1);
  }
  void Eps(std::int32_t from, std::int32_t to) {
    if (!overflow) nodes[static_cast<std::size_t>(from)].eps.push_back(to);
  }

  Fragment Build(const Expr& e) {
    if (overflow) return {0, 0};
    const Expr::Node& n = *e.node_;
    switch (n.kind) {
      case Expr::Kind::kBytes: {
        const std::int32_t s = New(), t = New();
        if (!overflow) {
          nodes[static_cast<std::size_t>(s)].set = n.set;
          nodes[static_cast<std::size_t>(s)].target = t;
        }
        return {s, t};
      }
      case Expr::Kind::kSeq: {
        const std::int32_t s = New();
        std::int32_t cur = s;
        for (const Expr& part : n.kids) {
          const Fragment f = Build(part);
          Eps(cur, f.start);
          cur = f.end;
        }
        return {s, cur};
      }
      case Expr::Kind::kAlt: {
        const std::int32_t s = New(), t = New();
        for (const Expr& option : n.kids) {
          const Fragment f = Build(option);
          Eps(s, f.start);
          Eps(f.end, t);
        }
        return {s, t};
      }
      case Expr::Kind::kRepeat:
        return Repeat(n.kids[0], n.min, n.max);
      case Expr::Kind::kSepBy: {
        const Expr& item = n.kids[0];
        const Expr& sep = n.kids[1];
        if (n.max == Expr::kUnbounded && n.min <= 1) {
          // s -> item -> x -> end, x -> sep -> item (one copy of each).
          const std::int32_t s = New(), t = New();
          const Fragment i = Build(item);
          const Fragment p = Build(sep);
          Eps(s, i.start);
          Eps(i.end, t);
          Eps(i.end, p.start);
          Eps(p.end, i.start);
          if (n.min == 0) Eps(s, t);
          return {s, t};
        }
        if (n.max == 0) return Build(Expr::Empty());
        // item (sep item){min-1, max-1}, optional as a whole when min is 0.
        const int rest_max = n.max == Expr::kUnbounded ? Expr::kUnbounded : n.max - 1;
        Expr list = Expr::Seq({item, Expr::Repeat(Expr::Seq({sep, item}), std::max(n.min - 1, 0), rest_max)});
        return Build(n.min == 0 ? Expr::Optional(list) : list);
      }
    }
    return {0, 0};
  }

 private:
  Fragment Repeat(const Expr& e, int min, int max) {
    const std::int32_t s = New();
    std::int32_t cur = s;
    for (int i = 0; i < min && !overflow; ++i) {
      const Fragment f = Build(e);
      Eps(cur, f.start);
      cur = f.end;
    }
    if (max == Expr::kUnbounded) {
      const std::int32_t loop = New();
      const Fragment f = Build(e);
      Eps(cur, loop);
      Eps(loop, f.start);
      Eps(f.end, loop);
      return {s, loop};
    }
    const std::int32_t t = New();
    for (int i = min; i < max && !overflow; ++i) {
      const Fragment f = Build(e);
      Eps(cur, t);  // stop here
      Eps(cur, f.start);
      cur = f.end;
    }
    Eps(cur, t);
    return {s, t};
  }

  std::size_t limit_;
};

namespace {

using NodeSet = std::vector<std::int32_t>;  // sorted

void Close(const std::vector<NfaBuilder::NfaNode>& nfa, NodeSet& set, std::vector<char>& seen) {
  std::vector<std::int32_t> stack(set.begin(), set.end());
  for (auto n : set) seen[static_cast<std::size_t>(n)] = 1;
  while (!stack.empty()) {
    const std::int32_t n = stack.back();
    stack.pop_back();
    for (auto m : nfa[static_cast<std::size_t>(n)].eps) {
      if (!seen[static_cast<std::size_t>(m)]) {
        seen[static_cast<std::size_t>(m)] = 1;
        set.push_back(m);
        stack.push_back(m);
      }
    }
  }
  for (auto n : set) seen[static_cast<std::size_t>(n)] = 0;
  std::sort(set.begin(), set.end());
  set.erase(std::unique(set.begin(), set.end()), set.end());
}

}  // namespace

StatusOr<Dfa> Dfa::Compile(const Expr& e, const AutomatonLimits& limits) {
  NfaBuilder b(limits.max_nfa_nodes);
  const NfaBuilder::Fragment f = b.Build(e);
  if (b.overflow)
    return InvalidArgument("the constraint is too complex: its automaton exceeds " +
                           std::to_string(limits.max_nfa_nodes) + " nodes");
  const auto& nfa = b.nodes;

  // Bytes that no transition tells apart share a class.
  Dfa d;
  {
    std::vector<std::uint16_t> cls(256, 0);
    std::uint16_t count = 1;
    std::unordered_set<ByteSet> distinct;
    for (const auto& n : nfa)
      if (n.target >= 0) distinct.insert(n.set);
    for (const ByteSet& set : distinct) {
      std::map<std::pair<std::uint16_t, bool>, std::uint16_t> split;
      std::uint16_t next_count = 0;
      std::vector<std::uint16_t> updated(256);
      for (int c = 0; c < 256; ++c) {
        const auto key =
            std::make_pair(cls[static_cast<std::size_t>(c)], static_cast<bool>(set[static_cast<std::size_t>(c)]));
        auto [it, inserted] = split.emplace(key, next_count);
        if (inserted) ++next_count;
        updated[static_cast<std::size_t>(c)] = it->second;
      }
      if (next_count != count) {
        cls = std::move(updated);
        count = next_count;
      }
    }
    d.byte_class_ = std::move(cls);
    d.num_classes_ = count;
  }
  std::vector<unsigned char> representative(d.num_classes_);
  for (int c = 255; c >= 0; --c)
    representative[d.byte_class_[static_cast<std::size_t>(c)]] = static_cast<unsigned char>(c);

  std::vector<char> seen(nfa.size(), 0);
  std::map<NodeSet, std::int32_t> ids;
  std::vector<NodeSet> sets;
  NodeSet start{f.start};
  Close(nfa, start, seen);
  ids.emplace(start, 0);
  sets.push_back(start);
  std::vector<std::int32_t> next;
  for (std::size_t s = 0; s < sets.size(); ++s) {
    for (std::size_t c = 0; c < d.num_classes_; ++c) {
      const unsigned char r = representative[c];
      NodeSet to;
      for (auto n : sets[s]) {
        const auto& node = nfa[static_cast<std::size_t>(n)];
        if (node.target >= 0 && node.set[r]) to.push_back(node.target);
      }
      if (to.empty()) {
        next.push_back(kDead);
        continue;
      }
      Close(nfa, to, seen);
      auto [it, inserted] = ids.emplace(to, static_cast<std::int32_t>(sets.size()));
      if (inserted) {
        if (sets.size() >= limits.max_dfa_states)
          return InvalidArgument("the constraint is too complex: its automaton exceeds " +
                                 std::to_string(limits.max_dfa_states) + " states");
        sets.push_back(std::move(to));
      }
      next.push_back(it->second);
    }
  }
  const std::size_t n = sets.size();
  std::vector<bool> accepting(n);
  for (std::size_t s = 0; s < n; ++s) accepting[s] = std::binary_search(sets[s].begin(), sets[s].end(), f.end);

  // Keep the states from which acceptance is reachable.
  std::vector<std::vector<std::int32_t>> preds(n);
  for (std::size_t s = 0; s < n; ++s)
    for (std::size_t c = 0; c < d.num_classes_; ++c)
      if (auto t = next[s * d.num_classes_ + c]; t != kDead)
        preds[static_cast<std::size_t>(t)].push_back(static_cast<std::int32_t>(s));
  std::vector<bool> live(n, false);
  std::deque<std::int32_t> queue;
  for (std::size_t s = 0; s < n; ++s)
    if (accepting[s]) {
      live[s] = true;
      queue.push_back(static_cast<std::int32_t>(s));
    }
  while (!queue.empty()) {
    const auto s = queue.front();
    queue.pop_front();
    for (auto p : preds[static_cast<std::size_t>(s)])
      if (!live[static_cast<std::size_t>(p)]) {
        live[static_cast<std::size_t>(p)] = true;
        queue.push_back(p);
      }
  }
  if (!live[0]) return InvalidArgument("the constraint cannot be satisfied: no output matches it");
  std::vector<std::int32_t> renumber(n, kDead);
  std::int32_t kept = 0;
  for (std::size_t s = 0; s < n; ++s)
    if (live[s]) renumber[s] = kept++;
  d.next_.assign(static_cast<std::size_t>(kept) * d.num_classes_, kDead);
  d.accepting_.assign(static_cast<std::size_t>(kept), false);
  for (std::size_t s = 0; s < n; ++s) {
    if (!live[s]) continue;
    const auto ns = static_cast<std::size_t>(renumber[s]);
    d.accepting_[ns] = accepting[s];
    for (std::size_t c = 0; c < d.num_classes_; ++c) {
      const auto t = next[s * d.num_classes_ + c];
      d.next_[ns * d.num_classes_ + c] = t == kDead ? kDead : renumber[static_cast<std::size_t>(t)];
    }
  }
  return d;
}

std::int32_t Dfa::Walk(std::int32_t s, std::string_view bytes) const {
  for (char c : bytes) {
    if (s == kDead) return kDead;
    s = Next(s, static_cast<unsigned char>(c));
  }
  return s;
}

bool Dfa::HasExits(std::int32_t s) const {
  for (std::size_t c = 0; c < num_classes_; ++c)
    if (next_[static_cast<std::size_t>(s) * num_classes_ + c] != kDead) return true;
  return false;
}

bool Dfa::Matches(std::string_view bytes) const {
  const auto s = Walk(start(), bytes);
  return s != kDead && Accepting(s);
}

std::vector<std::int32_t> Dfa::DistancesToAccept(const ByteSet& usable) const {
  const std::size_t n = num_states();
  std::vector<bool> class_usable(num_classes_, false);
  for (int b = 0; b < 256; ++b)
    if (usable[static_cast<std::size_t>(b)]) class_usable[byte_class_[static_cast<std::size_t>(b)]] = true;
  std::vector<std::vector<std::int32_t>> preds(n);
  for (std::size_t s = 0; s < n; ++s)
    for (std::size_t c = 0; c < num_classes_; ++c)
      if (auto t = next_[s * num_classes_ + c]; t != kDead && class_usable[c])
        preds[static_cast<std::size_t>(t)].push_back(static_cast<std::int32_t>(s));
  std::vector<std::int32_t> dist(n, kUnreachable);
  std::deque<std::int32_t> queue;
  for (std::size_t s = 0; s < n; ++s)
    if (accepting_[s]) {
      dist[s] = 0;
      queue.push_back(static_cast<std::int32_t>(s));
    }
  while (!queue.empty()) {
    const auto s = queue.front();
    queue.pop_front();
    for (auto p : preds[static_cast<std::size_t>(s)])
      if (dist[static_cast<std::size_t>(p)] == kUnreachable) {
        dist[static_cast<std::size_t>(p)] = dist[static_cast<std::size_t>(s)] + 1;
        queue.push_back(p);
      }
  }
  return dist;
}

}  // namespace ropeserve::structured
