// Post-processors (tokenizer.json "post_processor") and the Encoding
// helpers they use; decoders are in decoders.cc.
#include <nlohmann/json.hpp>

#include "server/tokenizer/component_json.h"
#include "server/tokenizer/components.h"
#include "server/tokenizer/pattern.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::tok {

using nlohmann::json;

StatusOr<std::shared_ptr<Pattern>> MakePattern(const json& j, const std::string& where);

// --------------------------------------------------------------- byte chars

namespace {
struct ByteTables {
  char32_t to_char[256];
  std::unordered_map<char32_t, std::uint8_t> to_byte;
  ByteTables() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      to_byte[to_char[b]] = static_cast<std::uint8_t>(b);
    }
  }
};
const ByteTables& Bytes() {
  static const ByteTables t;
  return t;
}
}  // namespace

char32_t ByteToChar(std::uint8_t b) { return Bytes().to_char[b]; }
int CharToByte(char32_t c) {
  const auto& m = Bytes().to_byte;
  auto it = m.find(c);
  return it == m.end() ? -1 : it->second;
}

// ----------------------------------------------------------------- Encoding

void Encoding::Append(const Encoding& o) {
  ids.insert(ids.end(), o.ids.begin(), o.ids.end());
  type_ids.insert(type_ids.end(), o.type_ids.begin(), o.type_ids.end());
  tokens.insert(tokens.end(), o.tokens.begin(), o.tokens.end());
  offsets.insert(offsets.end(), o.offsets.begin(), o.offsets.end());
  special_tokens_mask.insert(special_tokens_mask.end(), o.special_tokens_mask.begin(), o.special_tokens_mask.end());
  sequence_ids.insert(sequence_ids.end(), o.sequence_ids.begin(), o.sequence_ids.end());
  words.insert(words.end(), o.words.begin(), o.words.end());
}

Encoding Encoding::Range(size_t s, size_t e) const {
  Encoding r;
  r.ids.assign(ids.begin() + s, ids.begin() + e);
  r.type_ids.assign(type_ids.begin() + s, type_ids.begin() + e);
  r.tokens.assign(tokens.begin() + s, tokens.begin() + e);
  r.offsets.assign(offsets.begin() + s, offsets.begin() + e);
  r.special_tokens_mask.assign(special_tokens_mask.begin() + s, special_tokens_mask.begin() + e);
  r.sequence_ids.assign(sequence_ids.begin() + s, sequence_ids.begin() + e);
  r.words.assign(words.begin() + s, words.begin() + e);
  return r;
}

void Encoding::MergeWith(const Encoding& pair) {
  std::vector<Encoding> over;
  for (const Encoding& mine : overflowing) {
    Encoding n = mine;
    n.MergeWith(pair);
    over.push_back(std::move(n));
    for (const Encoding& theirs : pair.overflowing) {
      Encoding m = mine;
      m.MergeWith(theirs);
      over.push_back(std::move(m));
    }
  }
  for (const Encoding& theirs : pair.overflowing) {
    Encoding n = *this;
    n.MergeWith(theirs);
    over.push_back(std::move(n));
  }
  Append(pair);
  overflowing = std::move(over);
}

Encoding Encoding::Merge(std::vector<Encoding> encodings) {
  Encoding out;
  for (const Encoding& e : encodings) out.MergeWith(e);
  return out;
}

namespace {

struct SpecialPiece {
  std::vector<TokenId> ids;
  std::vector<std::string> tokens;
};

Encoding MakeSpecial(const SpecialPiece& p, std::uint32_t type_id) {
  Encoding e;
  e.ids = p.ids;
  e.tokens = p.tokens;
  e.type_ids.assign(p.ids.size(), type_id);
  e.offsets.assign(p.ids.size(), Offsets{0, 0});
  e.special_tokens_mask.assign(p.ids.size(), 1);
  e.sequence_ids.assign(p.ids.size(), -1);
  e.words.assign(p.ids.size(), -1);
  return e;
}

// As the reference's set_type_ids: the main encoding only; overflowing
// windows keep the type ids they were created with.
void SetTypeIds(Encoding& e, std::uint32_t t) { e.type_ids.assign(e.ids.size(), t); }

// Applies `fn` to an encoding and all of its overflowing windows.
template <typename Fn>
void ForAll(Encoding& e, Fn&& fn) {
  fn(e);
  for (Encoding& o : e.overflowing) ForAll(o, fn);
}

void TrimByteLevelOffsets(Encoding& e, bool add_prefix_space) {
  const char32_t g = ByteToChar(' ');
  for (size_t i = 0; i < e.size(); ++i) {
    const std::string& t = e.tokens[i];
    std::u32string cs;
    for (size_t k = 0; k < t.size();) {
      size_t n;
      cs.push_back(DecodeUtf8(t, k, &n));
      k += n;
    }
    auto is_space = [&](char32_t c) { return c == g || IsWhitespace(c); };
    size_t lead = 0, trail = 0;
    while (lead < cs.size() && is_space(cs[lead])) ++lead;
    while (trail < cs.size() && is_space(cs[cs.size() - 1 - trail])) ++trail;
    Offsets& o = e.offsets[i];
    if (lead > 0) {
      const bool is_first = i == 0 || o.start == 0;
      if (is_first && add_prefix_space && lead == 1) lead = 0;
      o.start = std::min(o.start + lead, o.end);
    }
    if (trail > 0 && o.end >= trail) o.end = std::max(o.end - trail, o.start);
  }
}

class TemplateProcessor final : public PostProcessor {
 public:
  struct Piece {
    bool is_sequence;
    int sequence;  // 0 = A, 1 = B
    std::string special;
    std::uint32_t type_id;
  };
  std::vector<Piece> single, pair;
  std::unordered_map<std::string, SpecialPiece> specials;

  size_t AddedTokens(bool is_pair) const override {
    size_t n = 0;
    for (const Piece& p : is_pair ? pair : single) {
      if (!p.is_sequence) n += specials.at(p.special).ids.size();
    }
    return n;
  }

  StatusOr<std::vector<Encoding>> ProcessEncodings(std::vector<Encoding> encs, bool add_special) const override {
    const auto& tmpl = encs.size() > 1 ? pair : single;
    std::vector<Encoding> out;
    for (const Piece& p : tmpl) {
      if (p.is_sequence) {
        if (static_cast<size_t>(p.sequence) >= encs.size()) continue;
        Encoding part = encs[p.sequence];
        SetTypeIds(part, p.type_id);
        out.push_back(std::move(part));
      } else if (add_special) {
        out.push_back(MakeSpecial(specials.at(p.special), p.type_id));
      }
    }
    return out;
  }
};

class BertLikeProcessor final : public PostProcessor {
 public:
  BertLikeProcessor(bool roberta, SpecialPiece cls, SpecialPiece sep, bool trim, bool prefix)
      : roberta_(roberta), cls_(std::move(cls)), sep_(std::move(sep)), trim_(trim), prefix_(prefix) {}
  size_t AddedTokens(bool is_pair) const override { return is_pair ? (roberta_ ? 4 : 3) : 2; }
  StatusOr<std::vector<Encoding>> ProcessEncodings(std::vector<Encoding> encs, bool add_special) const override {
    if (roberta_) {
      for (Encoding& e : encs) {
        if (trim_) ForAll(e, [&](Encoding& x) { TrimByteLevelOffsets(x, prefix_); });
        SetTypeIds(e, 0);  // "RoBERTa is weird": every type id is 0
      }
    }
    if (!add_special) return encs;
    std::vector<Encoding> out;
    for (size_t i = 0; i < encs.size(); ++i) {
      // Wraps one sequence (and each of its windows) in its special tokens.
      std::function<Encoding(const Encoding&, bool)> wrap = [&](const Encoding& e, bool top) {
        Encoding w;
        const std::uint32_t t = (i == 0 || roberta_) ? 0 : 1;
        if (i == 0)
          w.Append(MakeSpecial(cls_, 0));
        else if (roberta_)
          w.Append(MakeSpecial(sep_, 0));
        Encoding body = e;
        body.overflowing.clear();
        // BERT keeps each sequence's own type ids (0 for the first, 1 for
        // the second); RoBERTa makes every type id 0.
        if (roberta_) SetTypeIds(body, 0);
        w.Append(body);
        w.Append(MakeSpecial(sep_, t));
        if (top) {
          for (const Encoding& o : e.overflowing) w.overflowing.push_back(wrap(o, false));
        }
        return w;
      };
      out.push_back(wrap(encs[i], true));
    }
    return out;
  }

 private:
  bool roberta_;
  SpecialPiece cls_, sep_;
  bool trim_, prefix_;
};

class ByteLevelProcessor final : public PostProcessor {
 public:
  ByteLevelProcessor(bool trim, bool prefix) : trim_(trim), prefix_(prefix) {}
  size_t AddedTokens(bool) const override { return 0; }
  StatusOr<std::vector<Encoding>> ProcessEncodings(std::vector<Encoding> encs, bool) const override {
    if (trim_) {
      for (Encoding& e : encs) ForAll(e, [&](Encoding& x) { TrimByteLevelOffsets(x, prefix_); });
    }
    return encs;
  }

 private:
  bool trim_, prefix_;
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> p) : parts_(std::move(p)) {}
  size_t AddedTokens(bool is_pair) const override {
    size_t n = 0;
    for (const auto& p : parts_) n += p->AddedTokens(is_pair);
    return n;
  }
  StatusOr<std::vector<Encoding>> ProcessEncodings(std::vector<Encoding> encs, bool add_special) const override {
    for (const auto& p : parts_) {
      RS_ASSIGN_OR_RETURN(encs, p->ProcessEncodings(std::move(encs), add_special));
    }
    return encs;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

StatusOr<SpecialPiece> ReadPair(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_string() || !IsTokenId((*it)[1])) {
    return Bad(where, std::string("'") + key + "' must be [token, id]");
  }
  return SpecialPiece{{(*it)[1].get<TokenId>()}, {(*it)[0].get<std::string>()}};
}

StatusOr<std::vector<TemplateProcessor::Piece>> ReadTemplate(
    const json& j, const char* key, const std::string& where,
    const std::unordered_map<std::string, SpecialPiece>& specials) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return Bad(where, std::string("missing template '") + key + "'");
  std::vector<TemplateProcessor::Piece> out;
  for (const json& p : *it) {
    if (p.contains("Sequence") && p["Sequence"].is_object()) {
      const json& s = p["Sequence"];
      const std::string id = s.value("id", "A");
      if (id != "A" && id != "B") return Bad(where, "sequence id must be A or B");
      out.push_back({true, id == "A" ? 0 : 1, "", s.value("type_id", 0u)});
    } else if (p.contains("SpecialToken") && p["SpecialToken"].is_object()) {
      const json& s = p["SpecialToken"];
      const std::string id = s.value("id", "");
      if (!specials.count(id))
        return Bad(where, "template uses special token '" + id + "' not listed in special_tokens");
      out.push_back({false, 0, id, s.value("type_id", 0u)});
    } else {
      return Bad(where, "template piece must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<PostProcessor>> MakePostProcessor(const json& j) {
  const std::string type = TypeOf(j);
  const std::string where = "post_processor " + type;
  using P = std::unique_ptr<PostProcessor>;
  if (type == "TemplateProcessing") {
    auto t = std::make_unique<TemplateProcessor>();
    if (j.contains("special_tokens")) {
      if (!j["special_tokens"].is_object()) return Bad(where, "'special_tokens' must be an object");
      for (auto it = j["special_tokens"].begin(); it != j["special_tokens"].end(); ++it) {
        const json& s = it.value();
        SpecialPiece p;
        if (!s.contains("ids") || !s["ids"].is_array() || !s.contains("tokens") || !s["tokens"].is_array() ||
            s["ids"].size() != s["tokens"].size()) {
          return Bad(where, "special token '" + it.key() + "' needs 'ids' and 'tokens' of equal length");
        }
        for (const json& id : s["ids"]) {
          if (!IsTokenId(id)) return Bad(where, "special token ids must be integers from 0 to 2^31 - 1");
          p.ids.push_back(id.get<TokenId>());
        }
        for (const json& tk : s["tokens"]) {
          if (!tk.is_string()) return Bad(where, "special token strings must be strings");
          p.tokens.push_back(tk.get<std::string>());
        }
        t->specials.emplace(it.key(), std::move(p));
      }
    }
    RS_ASSIGN_OR_RETURN(t->single, ReadTemplate(j, "single", where, t->specials));
    RS_ASSIGN_OR_RETURN(t->pair, ReadTemplate(j, "pair", where, t->specials));
    return P(std::move(t));
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    const bool roberta = type == "RobertaProcessing";
    RS_ASSIGN_OR_RETURN(SpecialPiece sep, ReadPair(j, "sep", where));
    RS_ASSIGN_OR_RETURN(SpecialPiece cls, ReadPair(j, "cls", where));
    RS_ASSIGN_OR_RETURN(bool trim, JsonReader(j, where).Bool("trim_offsets", true));
    RS_ASSIGN_OR_RETURN(bool prefix, JsonReader(j, where).Bool("add_prefix_space", true));
    return P(new BertLikeProcessor(roberta, std::move(cls), std::move(sep), trim, prefix));
  }
  if (type == "ByteLevel") {
    RS_ASSIGN_OR_RETURN(bool trim, JsonReader(j, where).Bool("trim_offsets", true));
    RS_ASSIGN_OR_RETURN(bool prefix, JsonReader(j, where).Bool("add_prefix_space", true));
    return P(new ByteLevelProcessor(trim, prefix));
  }
  if (type == "Sequence") {
    RS_ASSIGN_OR_RETURN(const json* arr, JsonReader(j, where).Array("processors"));
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (const json& sub : *arr) {
      RS_ASSIGN_OR_RETURN(auto p, MakePostProcessor(sub));
      parts.push_back(std::move(p));
    }
    return P(new SequenceProcessor(std::move(parts)));
  }
  if (type.empty()) return Bad("post_processor", "object without a 'type'");
  return Unimplemented("post_processor: unsupported type '" + type + "'");
}
}  // namespace ropeserve::tok
