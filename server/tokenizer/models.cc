// Tokenization models (tokenizer.json "model"): BPE, WordPiece, Unigram,
// WordLevel.
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <unordered_map>

#include "server/tokenizer/component_json.h"
#include "server/tokenizer/components.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::tok {

using nlohmann::json;

namespace {

// Shared vocabulary handling: token <-> id, with ids checked to be dense
// enough to index (ids may have gaps; those decode to nothing).
class Vocab {
 public:
  Status Add(const std::string& token, long long id, const std::string& where) {
    if (id < 0 || id > std::numeric_limits<std::int32_t>::max()) {
      return Bad(where, "vocabulary id out of range for '" + token + "'");
    }
    const auto uid = static_cast<TokenId>(id);
    if (!to_id_.emplace(token, uid).second) return Bad(where, "duplicate vocabulary entry '" + token + "'");
    if (static_cast<size_t>(uid) >= to_token_.size()) to_token_.resize(static_cast<size_t>(uid) + 1);
    if (to_token_[uid]) return Bad(where, "id " + std::to_string(uid) + " used twice in the vocabulary");
    to_token_[uid] = token;
    return Status::Ok();
  }
  std::optional<TokenId> Find(std::string_view t) const {
    auto it = to_id_.find(std::string(t));
    if (it == to_id_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* Token(TokenId id) const {
    return id >= 0 && static_cast<size_t>(id) < to_token_.size() && to_token_[id] ? &*to_token_[id] : nullptr;
  }
  size_t size() const { return to_token_.size(); }

 private:
  std::unordered_map<std::string, TokenId> to_id_;
  std::vector<std::optional<std::string>> to_token_;
};

Status ReadVocabObject(const json& j, const std::string& where, Vocab* vocab) {
  auto it = j.find("vocab");
  if (it == j.end() || !it->is_object()) return Bad(where, "missing object field 'vocab'");
  for (auto e = it->begin(); e != it->end(); ++e) {
    if (!e.value().is_number_integer()) return Bad(where, "vocabulary id of '" + e.key() + "' is not an integer");
    RS_RETURN_IF_ERROR(vocab->Add(e.key(), e.value().get<long long>(), where));
  }
  return Status::Ok();
}

std::string ByteFallbackToken(std::uint8_t b) {
  static const char* hex = "0123456789ABCDEF";
  std::string s = "<0x";
  s.push_back(hex[b >> 4]);
  s.push_back(hex[b & 15]);
  s.push_back('>');
  return s;
}

// The vocabulary lookups every model shares.
class VocabModel : public Model {
 public:
  std::optional<TokenId> TokenToId(const std::string& t) const override { return vocab_.Find(t); }
  const std::string* IdToToken(TokenId id) const override { return vocab_.Token(id); }
  size_t VocabSize() const override { return vocab_.size(); }

 protected:
  Vocab vocab_;
};

// ---------------------------------------------------------------------- BPE

class BpeModel final : public VocabModel {
 public:
  static StatusOr<std::unique_ptr<Model>> Make(const json& j) {
    const std::string where = "model BPE";
    auto m = std::unique_ptr<BpeModel>(new BpeModel());
    RS_RETURN_IF_ERROR(ReadVocabObject(j, where, &m->vocab_));
    if (j.contains("dropout") && !j["dropout"].is_null()) {
      const double d = j["dropout"].is_number() ? j["dropout"].get<double>() : -1;
      if (d != 0.0) return Unimplemented(where + ": BPE dropout is not supported (inference tokenizers have none)");
    }
    RS_ASSIGN_OR_RETURN(m->prefix_, JsonReader(j, where).String("continuing_subword_prefix", ""));
    RS_ASSIGN_OR_RETURN(m->suffix_, JsonReader(j, where).String("end_of_word_suffix", ""));
    RS_ASSIGN_OR_RETURN(m->fuse_unk_, JsonReader(j, where).Bool("fuse_unk", false));
    RS_ASSIGN_OR_RETURN(m->byte_fallback_, JsonReader(j, where).Bool("byte_fallback", false));
    RS_ASSIGN_OR_RETURN(m->ignore_merges_, JsonReader(j, where).Bool("ignore_merges", false));
    if (j.contains("unk_token") && !j["unk_token"].is_null()) {
      RS_ASSIGN_OR_RETURN(std::string unk, JsonReader(j, where).String("unk_token"));
      m->unk_ = m->vocab_.Find(unk);
      if (!m->unk_) return Bad(where, "unk_token '" + unk + "' is not in the vocabulary");
    }
    RS_ASSIGN_OR_RETURN(const json* merges, JsonReader(j, where).Array("merges"));
    std::uint32_t rank = 0;
    for (const json& mj : *merges) {
      std::string a, b;
      if (mj.is_string()) {
        const std::string s = mj.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) return Bad(where, "merge '" + s + "' is not two tokens separated by a space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
        a = mj[0].get<std::string>();
        b = mj[1].get<std::string>();
      } else {
        return Bad(where, "merge #" + std::to_string(rank) + " must be \"a b\" or [\"a\", \"b\"]");
      }
      const auto ia = m->vocab_.Find(a), ib = m->vocab_.Find(b);
      if (!ia || !ib) return Bad(where, "merge '" + a + " " + b + "' uses a token not in the vocabulary");
      std::string merged = a;
      merged +=
          (!m->prefix_.empty() && b.compare(0, m->prefix_.size(), m->prefix_) == 0) ? b.substr(m->prefix_.size()) : b;
      const auto im = m->vocab_.Find(merged);
      if (!im) return Bad(where, "merge '" + a + " " + b + "' produces '" + merged + "', not in the vocabulary");
      m->merges_.emplace(Key(*ia, *ib), std::make_pair(rank, *im));
      ++rank;
    }
    return std::unique_ptr<Model>(std::move(m));
  }

  Status Tokenize(const std::string& word, std::vector<Token>* out) const override {
    if (word.empty()) return Status::Ok();
    if (ignore_merges_) {
      if (auto id = vocab_.Find(word)) {
        out->push_back({*id, {0, word.size()}});
        return Status::Ok();
      }
    }
    const bool cacheable = word.size() < 256;
    if (cacheable) {
      std::shared_lock lock(cache_mu_);
      auto it = cache_.find(word);
      if (it != cache_.end()) {
        out->insert(out->end(), it->second.begin(), it->second.end());
        return Status::Ok();
      }
    }
    std::vector<Token> toks = MergeWord(word);
    if (cacheable) {
      std::unique_lock lock(cache_mu_);
      if (cache_.size() >= kCacheCapacity) cache_.clear();
      cache_.emplace(word, toks);
    }
    out->insert(out->end(), toks.begin(), toks.end());
    return Status::Ok();
  }

 private:
  static constexpr size_t kCacheCapacity = 10000;
  static std::uint64_t Key(TokenId a, TokenId b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  struct Symbol {
    TokenId id;
    int prev, next;
    size_t start, len;  // bytes in the word
  };

  std::vector<Token> MergeWord(const std::string& word) const {
    std::vector<Symbol> syms;
    syms.reserve(word.size());
    std::string piece;
    for (size_t i = 0; i < word.size();) {
      const size_t n = std::min(Utf8LeadLength(static_cast<unsigned char>(word[i])), word.size() - i);
      const bool first = i == 0, last = i + n == word.size();
      piece.clear();
      if (!first) piece += prefix_;
      piece.append(word, i, n);
      if (last) piece += suffix_;
      if (auto id = vocab_.Find(piece)) {
        syms.push_back({*id, 0, 0, i, n});
      } else {
        bool done = false;
        if (byte_fallback_) {
          std::vector<TokenId> ids;
          for (size_t k = 0; k < n; ++k) {
            auto bid = vocab_.Find(ByteFallbackToken(static_cast<std::uint8_t>(word[i + k])));
            if (!bid) break;
            ids.push_back(*bid);
          }
          if (ids.size() == n) {
            for (size_t k = 0; k < n; ++k) syms.push_back({ids[k], 0, 0, i + k, 1});
            done = true;
          }
        }
        if (!done && unk_) {
          if (fuse_unk_ && !syms.empty() && syms.back().id == *unk_ && syms.back().start + syms.back().len == i) {
            syms.back().len += n;
          } else {
            syms.push_back({*unk_, 0, 0, i, n});
          }
        }
      }
      i += n;
    }
    for (size_t k = 0; k < syms.size(); ++k) {
      syms[k].prev = static_cast<int>(k) - 1;
      syms[k].next = k + 1 < syms.size() ? static_cast<int>(k + 1) : -1;
    }
    // Lowest rank first, then leftmost position.
    struct Cand {
      std::uint32_t rank;
      int pos;
      TokenId new_id;
      bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand> heap;
    auto push = [&](int pos) {
      if (pos < 0 || syms[pos].next < 0) return;
      auto it = merges_.find(Key(syms[pos].id, syms[syms[pos].next].id));
      if (it != merges_.end()) heap.push({it->second.first, pos, it->second.second});
    };
    for (size_t k = 0; k + 1 < syms.size(); ++k) push(static_cast<int>(k));
    while (!heap.empty()) {
      const Cand c = heap.top();
      heap.pop();
      Symbol& s = syms[c.pos];
      if (s.len == 0 || s.next < 0) continue;
      auto it = merges_.find(Key(s.id, syms[s.next].id));
      if (it == merges_.end() || it->second.second != c.new_id) continue;
      Symbol& right = syms[s.next];
      s.id = c.new_id;
      s.len += right.len;
      right.len = 0;
      s.next = right.next;
      if (s.next >= 0) syms[s.next].prev = c.pos;
      push(s.prev);
      push(c.pos);
    }
    std::vector<Token> toks;
    for (int k = syms.empty() ? -1 : 0; k >= 0; k = syms[k].next) {
      toks.push_back({syms[k].id, {syms[k].start, syms[k].start + syms[k].len}});
    }
    return toks;
  }

 public:
  const std::string& ContinuingSubwordPrefix() const override { return prefix_; }

 private:
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, TokenId>> merges_;  // -> (rank, merged id)
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::optional<TokenId> unk_;
  mutable std::shared_mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<Token>> cache_;
};

// ---------------------------------------------------------------- WordPiece

class WordPieceModel final : public VocabModel {
 public:
  static StatusOr<std::unique_ptr<Model>> Make(const json& j) {
    const std::string where = "model WordPiece";
    auto m = std::unique_ptr<WordPieceModel>(new WordPieceModel());
    RS_RETURN_IF_ERROR(ReadVocabObject(j, where, &m->vocab_));
    RS_ASSIGN_OR_RETURN(std::string unk, JsonReader(j, where).String("unk_token", "[UNK]"));
    m->unk_ = m->vocab_.Find(unk);
    if (!m->unk_) return Bad(where, "unk_token '" + unk + "' is not in the vocabulary");
    RS_ASSIGN_OR_RETURN(m->prefix_, JsonReader(j, where).String("continuing_subword_prefix", "##"));
    RS_ASSIGN_OR_RETURN(long long mx, JsonReader(j, where).Int("max_input_chars_per_word", 100));
    if (mx <= 0) return Bad(where, "'max_input_chars_per_word' must be positive");
    m->max_chars_ = static_cast<size_t>(mx);
    return std::unique_ptr<Model>(std::move(m));
  }

  Status Tokenize(const std::string& word, std::vector<Token>* out) const override {
    if (word.empty()) return Status::Ok();
    if (CountCodePoints(word) > max_chars_) {
      out->push_back({*unk_, {0, word.size()}});
      return Status::Ok();
    }
    std::vector<Token> toks;
    size_t start = 0;
    std::string sub;
    while (start < word.size()) {
      size_t end = word.size();
      std::optional<TokenId> found;
      while (start < end) {
        sub.clear();
        if (start > 0) sub = prefix_;
        sub.append(word, start, end - start);
        if ((found = vocab_.Find(sub))) break;
        // step back one character
        do {
          --end;
        } while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
      }
      if (!found) {
        out->push_back({*unk_, {0, word.size()}});
        return Status::Ok();
      }
      toks.push_back({*found, {start, end}});
      start = end;
    }
    out->insert(out->end(), toks.begin(), toks.end());
    return Status::Ok();
  }
  const std::string& ContinuingSubwordPrefix() const override { return prefix_; }

 private:
  std::optional<TokenId> unk_;
  std::string prefix_;
  size_t max_chars_ = 100;
};

// ---------------------------------------------------------------- WordLevel

class WordLevelModel final : public VocabModel {
 public:
  static StatusOr<std::unique_ptr<Model>> Make(const json& j) {
    const std::string where = "model WordLevel";
    auto m = std::unique_ptr<WordLevelModel>(new WordLevelModel());
    RS_RETURN_IF_ERROR(ReadVocabObject(j, where, &m->vocab_));
    RS_ASSIGN_OR_RETURN(std::string unk, JsonReader(j, where).String("unk_token", "<unk>"));
    m->unk_ = m->vocab_.Find(unk);
    return std::unique_ptr<Model>(std::move(m));
  }
  Status Tokenize(const std::string& word, std::vector<Token>* out) const override {
    if (auto id = vocab_.Find(word)) {
      out->push_back({*id, {0, word.size()}});
    } else if (unk_) {
      out->push_back({*unk_, {0, word.size()}});
    } else {
      return InvalidArgument("model WordLevel: '" + word + "' is not in the vocabulary and there is no unk_token");
    }
    return Status::Ok();
  }

 private:
  std::optional<TokenId> unk_;
};

// ------------------------------------------------------------------ Unigram

class UnigramModel final : public VocabModel {
 public:
  static StatusOr<std::unique_ptr<Model>> Make(const json& j) {
    const std::string where = "model Unigram";
    auto m = std::unique_ptr<UnigramModel>(new UnigramModel());
    RS_ASSIGN_OR_RETURN(const json* vocab, JsonReader(j, where).Array("vocab"));
    m->min_score_ = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < vocab->size(); ++i) {
      const json& e = (*vocab)[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number()) {
        return Bad(where, "vocab entry #" + std::to_string(i) + " must be [piece, score]");
      }
      RS_RETURN_IF_ERROR(m->vocab_.Add(e[0].get<std::string>(), static_cast<long long>(i), where));
      m->scores_.push_back(e[1].get<double>());
      m->min_score_ = std::min(m->min_score_, m->scores_.back());
      m->max_piece_bytes_ = std::max(m->max_piece_bytes_, e[0].get<std::string>().size());
    }
    if (m->scores_.empty()) return Bad(where, "empty vocabulary");
    RS_ASSIGN_OR_RETURN(long long unk, JsonReader(j, where).Int("unk_id", -1));
    if (unk >= static_cast<long long>(m->scores_.size())) return Bad(where, "'unk_id' is outside the vocabulary");
    if (unk >= 0) m->unk_ = static_cast<TokenId>(unk);
    RS_ASSIGN_OR_RETURN(m->byte_fallback_, JsonReader(j, where).Bool("byte_fallback", false));
    return std::unique_ptr<Model>(std::move(m));
  }

  Status Tokenize(const std::string& word, std::vector<Token>* out) const override {
    if (word.empty()) return Status::Ok();
    // Viterbi over byte positions on character boundaries.
    constexpr double kUnkPenalty = 10.0;
    const double unk_score = min_score_ - kUnkPenalty;
    struct Node {
      bool set = false;
      double score = 0;
      size_t from = 0;
      std::optional<TokenId> id;  // nullopt = unknown piece
    };
    std::vector<Node> best(word.size() + 1);
    best[0].set = true;
    std::string piece;
    for (size_t start = 0; start < word.size();) {
      const size_t clen = std::min(Utf8LeadLength(static_cast<unsigned char>(word[start])), word.size() - start);
      if (best[start].set) {
        bool single = false;
        for (size_t end = start + 1; end <= word.size() && end - start <= max_piece_bytes_; ++end) {
          if (end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) continue;
          piece.assign(word, start, end - start);
          auto id = vocab_.Find(piece);
          if (!id) continue;
          const double cand = best[start].score + scores_[*id];
          if (!best[end].set || cand > best[end].score) best[end] = {true, cand, start, id};
          if (end - start == clen) single = true;
        }
        if (!single) {
          const double cand = best[start].score + unk_score;
          Node& t = best[start + clen];
          if (!t.set || cand > t.score) t = {true, cand, start, std::nullopt};
        }
      }
      start += clen;
    }
    std::vector<Token> rev;
    for (size_t pos = word.size(); pos > 0;) {
      const Node& n = best[pos];
      rev.push_back({n.id ? *n.id : kUnknown, {n.from, pos}});
      pos = n.from;
    }
    std::vector<Token> toks(rev.rbegin(), rev.rend());
    // Unknown pieces: byte fallback, else fused into one unk token.
    for (size_t k = 0; k < toks.size(); ++k) {
      if (toks[k].id != kUnknown) {
        out->push_back(toks[k]);
        continue;
      }
      size_t e = k;
      while (e + 1 < toks.size() && toks[e + 1].id == kUnknown) ++e;
      const Offsets span{toks[k].offsets.start, toks[e].offsets.end};
      bool done = false;
      if (byte_fallback_) {
        std::vector<Token> bytes;
        for (size_t b = span.start; b < span.end; ++b) {
          auto bid = vocab_.Find(ByteFallbackToken(static_cast<std::uint8_t>(word[b])));
          if (!bid) break;
          bytes.push_back({*bid, {b, b + 1}});
        }
        if (bytes.size() == span.end - span.start) {
          out->insert(out->end(), bytes.begin(), bytes.end());
          done = true;
        }
      }
      if (!done) {
        if (!unk_) return InvalidArgument("model Unigram: text has characters outside the vocabulary and no unk_id");
        out->push_back({*unk_, span});
      }
      k = e;
    }
    return Status::Ok();
  }

 private:
  static constexpr TokenId kUnknown = -1;  // never a vocabulary id
  std::vector<double> scores_;
  double min_score_ = 0;
  size_t max_piece_bytes_ = 0;
  std::optional<TokenId> unk_;
  bool byte_fallback_ = false;
};

}  // namespace

StatusOr<std::unique_ptr<Model>> MakeModel(const json& j) {
  if (!j.is_object()) return InvalidArgument("model: must be an object");
  std::string type = TypeOf(j);
  if (type.empty()) {
    // Old files omit the type; infer it as the reference does.
    if (j.contains("merges"))
      type = "BPE";
    else if (j.contains("continuing_subword_prefix") || j.contains("max_input_chars_per_word"))
      type = "WordPiece";
    else if (j.contains("unk_id"))
      type = "Unigram";
    else if (j.contains("vocab"))
      type = "WordLevel";
  }
  if (type == "BPE") return BpeModel::Make(j);
  if (type == "WordPiece") return WordPieceModel::Make(j);
  if (type == "Unigram") return UnigramModel::Make(j);
  if (type == "WordLevel") return WordLevelModel::Make(j);
  return Unimplemented("model: unsupported type '" + type + "'");
}

}  // namespace ropeserve::tok
