#include "server/tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/tokenizer/component_json.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::tok {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

StatusOr<std::string> ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return NotFound("cannot open " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StatusOr<json> ParseJson(const std::string& text, const std::string& what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(what + " is not valid JSON");
  if (!j.is_object()) return InvalidArgument(what + ": top level must be an object");
  return j;
}

// A token in tokenizer_config.json: "text" or {"content": "text", ...}.
std::optional<std::string> TokenText(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return std::nullopt;
}

Status ReadConfig(const json& j, TokenizerConfig* c) {
  if (auto t = j.find("chat_template"); t != j.end() && !t->is_null()) {
    if (t->is_string()) {
      c->chat_template = t->get<std::string>();
    } else if (t->is_array()) {
      for (const json& e : *t) {
        if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
            !e["template"].is_string()) {
          return InvalidArgument("tokenizer_config.json: chat_template list entries need 'name' and 'template'");
        }
        c->named_templates[e["name"].get<std::string>()] = e["template"].get<std::string>();
      }
      if (auto d = c->named_templates.find("default"); d != c->named_templates.end()) c->chat_template = d->second;
    } else {
      return InvalidArgument("tokenizer_config.json: chat_template must be a string or a list");
    }
  }
  if (auto v = TokenText(j, "bos_token")) c->bos_token = v;
  if (auto v = TokenText(j, "eos_token")) c->eos_token = v;
  if (auto v = TokenText(j, "pad_token")) c->pad_token = v;
  if (auto v = TokenText(j, "unk_token")) c->unk_token = v;
  if (auto v = TokenText(j, "cls_token")) c->cls_token = v;
  if (auto v = TokenText(j, "sep_token")) c->sep_token = v;
  return Status::Ok();
}

// Rust's notion of a word character for single_word added tokens.
bool IsWordChar(char32_t c) { return IsAlphanumeric(c) || c == '_'; }

char32_t LastChar(std::string_view s) {
  size_t b = s.size() - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  size_t n;
  return DecodeUtf8(s, b, &n);
}

// Byte index -> code point index, for converting offsets.
class CharIndex {
 public:
  explicit CharIndex(std::string_view s) : map_(s.size() + 1) {
    std::uint32_t c = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && i > 0) ++c;
      map_[i] = c;
    }
    map_[s.size()] = s.empty() ? 0 : c + 1;
  }
  Offsets Convert(Offsets b) const {
    if (b.start >= b.end) {
      const std::uint32_t at = map_[std::min(b.start, map_.size() - 1)];
      return {at, at};
    }
    return {map_[b.start], map_[b.end - 1] + 1};
  }

 private:
  std::vector<std::uint32_t> map_;
};

// Overflowing windows are copies of the input; bound how much a request can
// make us allocate (a 10 MB context with stride max_len-1 would otherwise
// be millions of windows).
constexpr size_t kMaxWindowTokens = size_t{1} << 24;

Status TruncateEncoding(Encoding& e, size_t max_len, size_t stride, TruncationDirection dir, size_t max_windows) {
  const size_t n = e.size();
  if (max_len >= n) return Status::Ok();
  if (max_len == 0) {
    Encoding all = std::move(e);
    e = Encoding();
    e.overflowing.push_back(std::move(all));
    return Status::Ok();
  }
  if (stride >= max_len) {
    return InvalidArgument("truncation stride (" + std::to_string(stride) +
                           ") must be smaller than the length kept for the sequence (" + std::to_string(max_len) +
                           " tokens)");
  }
  const size_t step = max_len - stride;
  if (max_windows > 0) {
    const size_t windows = n <= max_len ? 1 : (n - max_len + step - 1) / step + 1;
    if (windows > max_windows) {
      return InvalidArgument("the text would be split into " + std::to_string(windows) + " windows of " +
                             std::to_string(max_len) + " tokens with a stride of " + std::to_string(stride) +
                             "; the limit is " + std::to_string(max_windows) +
                             " (shorten the text, or use a longer window or a smaller stride)");
    }
  }
  if ((n / step + 1) * max_len > kMaxWindowTokens) {
    return InvalidArgument("truncation would produce more than " + std::to_string(kMaxWindowTokens) +
                           " tokens of overflowing windows; use a smaller stride");
  }
  std::vector<std::pair<size_t, size_t>> parts;
  if (dir == TruncationDirection::kRight) {
    for (size_t start = 0; start < n; start += step) {
      const size_t stop = std::min(start + max_len, n);
      parts.push_back({start, stop});
      if (stop == n) break;
    }
  } else {
    for (size_t k = n; k > 0;) {
      const size_t stop = k;
      const size_t start = stop < max_len ? 0 : stop - max_len;
      parts.push_back({start, stop});
      if (start == 0) break;
      if (k <= step) break;
      k -= step;
    }
  }
  Encoding out = e.Range(parts[0].first, parts[0].second);
  for (size_t i = 1; i < parts.size(); ++i) out.overflowing.push_back(e.Range(parts[i].first, parts[i].second));
  e = std::move(out);
  return Status::Ok();
}

Status TruncatePair(Encoding& a, std::optional<Encoding>& b, const Truncation& t) {
  if (t.max_length == 0) {
    RS_RETURN_IF_ERROR(TruncateEncoding(a, 0, t.stride, t.direction, t.max_windows));
    if (b) RS_RETURN_IF_ERROR(TruncateEncoding(*b, 0, t.stride, t.direction, t.max_windows));
    return Status::Ok();
  }
  const size_t total = a.size() + (b ? b->size() : 0);
  if (total <= t.max_length) return Status::Ok();
  const size_t to_remove = total - t.max_length;
  switch (t.strategy) {
    case TruncationStrategy::kLongestFirst: {
      if (!b) {
        RS_RETURN_IF_ERROR(TruncateEncoding(a, total - to_remove, t.stride, t.direction, t.max_windows));
        break;
      }
      size_t n1 = a.size(), n2 = b->size();
      const bool swap = n1 > n2;
      if (swap) std::swap(n1, n2);
      if (n1 > t.max_length)
        n2 = n1;
      else
        n2 = std::max(n1, t.max_length - n1);
      if (n1 + n2 > t.max_length) {
        n1 = t.max_length / 2;
        n2 = n1 + t.max_length % 2;
      }
      if (swap) std::swap(n1, n2);
      RS_RETURN_IF_ERROR(TruncateEncoding(a, n1, t.stride, t.direction, t.max_windows));
      RS_RETURN_IF_ERROR(TruncateEncoding(*b, n2, t.stride, t.direction, t.max_windows));
      // Both sequences overflowing combine pairwise (and nest) when merged.
      const size_t wa = a.overflowing.size() + 1, wb = b->overflowing.size() + 1;
      if (wa * wb * (wa + wb) * t.max_length > kMaxWindowTokens) {
        return InvalidArgument(
            "longest_first truncation of two long sequences would produce too many "
            "overflowing windows; truncate only_second or use a larger max_length");
      }
      break;
    }
    case TruncationStrategy::kOnlyFirst:
    case TruncationStrategy::kOnlySecond: {
      Encoding* target = t.strategy == TruncationStrategy::kOnlyFirst ? &a : (b ? &*b : nullptr);
      if (target == nullptr) return InvalidArgument("truncation only_second needs a second sequence");
      if (target->size() <= to_remove) {
        return InvalidArgument("truncation: the sequence to truncate (" + std::to_string(target->size()) +
                               " tokens) is too short to remove " + std::to_string(to_remove) +
                               " tokens; use longest_first or a larger max_length");
      }
      RS_RETURN_IF_ERROR(TruncateEncoding(*target, target->size() - to_remove, t.stride, t.direction, t.max_windows));
      break;
    }
  }
  return Status::Ok();
}

StatusOr<std::optional<Truncation>> ReadTruncation(const json& j) {
  auto it = j.find("truncation");
  if (it == j.end() || it->is_null()) return std::optional<Truncation>();
  if (!it->is_object()) return InvalidArgument("truncation: must be an object or null");
  Truncation t;
  const std::string where = "truncation";
  RS_ASSIGN_OR_RETURN(long long ml, JsonReader(*it, where).Int("max_length", 512));
  RS_ASSIGN_OR_RETURN(long long st, JsonReader(*it, where).Int("stride", 0));
  if (ml < 0 || st < 0) return InvalidArgument("truncation: max_length and stride must be >= 0");
  t.max_length = static_cast<size_t>(ml);
  t.stride = static_cast<size_t>(st);
  RS_ASSIGN_OR_RETURN(std::string strategy, JsonReader(*it, where).String("strategy", "LongestFirst"));
  if (strategy == "LongestFirst")
    t.strategy = TruncationStrategy::kLongestFirst;
  else if (strategy == "OnlyFirst")
    t.strategy = TruncationStrategy::kOnlyFirst;
  else if (strategy == "OnlySecond")
    t.strategy = TruncationStrategy::kOnlySecond;
  else
    return InvalidArgument("truncation: unknown strategy '" + strategy + "'");
  RS_ASSIGN_OR_RETURN(std::string dir, JsonReader(*it, where).String("direction", "Right"));
  if (dir == "Right")
    t.direction = TruncationDirection::kRight;
  else if (dir == "Left")
    t.direction = TruncationDirection::kLeft;
  else
    return InvalidArgument("truncation: unknown direction '" + dir + "'");
  return std::optional<Truncation>(t);
}

}  // namespace

StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::string& path) {
  RS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  RS_ASSIGN_OR_RETURN(json j, ParseJson(text, path));
  TokenizerConfig c;
  Status s = ReadConfig(j, &c);
  if (!s.ok()) return s.WithContext(path);
  return c;
}

bool Tokenizer::Matcher::empty() const {
  for (const auto& v : by_first_byte) {
    if (!v.empty()) return false;
  }
  return true;
}

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromPath(const std::string& path) {
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) p /= "tokenizer.json";
  if (!fs::exists(p, ec)) return NotFound("tokenizer file not found: " + p.string());
  RS_ASSIGN_OR_RETURN(std::string text, ReadFile(p));
  std::string config_text;
  const fs::path dir = p.parent_path();
  if (fs::exists(dir / "tokenizer_config.json", ec)) {
    RS_ASSIGN_OR_RETURN(config_text, ReadFile(dir / "tokenizer_config.json"));
  }
  auto tok = FromJson(text, config_text);
  if (!tok.ok()) return tok.status().WithContext(p.string());
  // special_tokens_map.json fills tokens the config did not name.
  if (fs::exists(dir / "special_tokens_map.json", ec)) {
    RS_ASSIGN_OR_RETURN(std::string stm, ReadFile(dir / "special_tokens_map.json"));
    RS_ASSIGN_OR_RETURN(json j, ParseJson(stm, (dir / "special_tokens_map.json").string()));
    auto* t = const_cast<Tokenizer*>(tok->get());
    if (!t->config_.bos_token) t->config_.bos_token = TokenText(j, "bos_token");
    if (!t->config_.eos_token) t->config_.eos_token = TokenText(j, "eos_token");
    if (!t->config_.pad_token) t->config_.pad_token = TokenText(j, "pad_token");
    if (!t->config_.unk_token) t->config_.unk_token = TokenText(j, "unk_token");
    if (!t->config_.cls_token) t->config_.cls_token = TokenText(j, "cls_token");
    if (!t->config_.sep_token) t->config_.sep_token = TokenText(j, "sep_token");
  }
  return tok;
}

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromJson(const std::string& text,
                                                               const std::string& config_text) {
  RS_ASSIGN_OR_RETURN(json j, ParseJson(text, "tokenizer.json"));
  auto t = std::shared_ptr<Tokenizer>(new Tokenizer());
  auto present = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  if (!present("model")) return InvalidArgument("tokenizer.json: missing 'model'");
  RS_ASSIGN_OR_RETURN(t->model_, MakeModel(j["model"]));
  if (present("normalizer")) {
    RS_ASSIGN_OR_RETURN(t->normalizer_, MakeNormalizer(j["normalizer"]));
  }
  if (present("pre_tokenizer")) {
    RS_ASSIGN_OR_RETURN(t->pre_tokenizer_, MakePreTokenizer(j["pre_tokenizer"]));
  }
  if (present("post_processor")) {
    RS_ASSIGN_OR_RETURN(t->post_, MakePostProcessor(j["post_processor"]));
  }
  if (present("decoder")) {
    RS_ASSIGN_OR_RETURN(t->decoder_, MakeDecoder(j["decoder"]));
    // WordPiece cleanup rewrites up to 7 bytes before a token (" do not").
    const std::string d = j["decoder"].dump();
    if (d.find("\"WordPiece\"") != std::string::npos && d.find("\"cleanup\":false") == std::string::npos) {
      t->decode_holdback_bytes_ = 8;
    }
  }
  RS_ASSIGN_OR_RETURN(t->truncation_, ReadTruncation(j));
  t->vocab_size_ = t->model_->VocabSize();
  if (present("added_tokens")) {
    if (!j["added_tokens"].is_array()) return InvalidArgument("tokenizer.json: 'added_tokens' must be a list");
    for (const json& a : j["added_tokens"]) {
      const std::string where = "added_tokens";
      if (!a.is_object()) return InvalidArgument("added_tokens: entries must be objects");
      AddedToken at;
      RS_ASSIGN_OR_RETURN(long long id, JsonReader(a, where).Int("id", -1));
      if (id < 0 || id > INT32_MAX) return InvalidArgument("added_tokens: missing or invalid 'id'");
      at.id = static_cast<TokenId>(id);
      RS_ASSIGN_OR_RETURN(at.content, JsonReader(a, where).String("content"));
      if (at.content.empty()) return InvalidArgument("added_tokens: empty 'content' for id " + std::to_string(id));
      RS_RETURN_IF_ERROR(CheckUtf8(at.content, "added token content"));
      RS_ASSIGN_OR_RETURN(at.single_word, JsonReader(a, where).Bool("single_word", false));
      RS_ASSIGN_OR_RETURN(at.lstrip, JsonReader(a, where).Bool("lstrip", false));
      RS_ASSIGN_OR_RETURN(at.rstrip, JsonReader(a, where).Bool("rstrip", false));
      RS_ASSIGN_OR_RETURN(at.normalized, JsonReader(a, where).Bool("normalized", true));
      RS_ASSIGN_OR_RETURN(at.special, JsonReader(a, where).Bool("special", false));
      t->added_.push_back(std::move(at));
    }
  }
  // Pointers into added_ are taken only now that it no longer grows.
  for (AddedToken& at : t->added_) {
    t->added_by_id_[at.id] = &at;
    t->added_by_content_[at.content] = at.id;
    if (at.special) t->special_ids_.insert(at.id);
    t->vocab_size_ = std::max<size_t>(t->vocab_size_, at.id + 1);
    // Normalized added tokens are matched against normalized text, so their
    // pattern is their normalized content.
    if (at.normalized && !at.special && t->normalizer_) {
      NormalizedString ns(at.content);
      RS_RETURN_IF_ERROR(t->normalizer_->Normalize(ns));
      if (ns.get() != at.content) {
        at.content = ns.get();
      }
      t->added_by_content_[at.content] = at.id;
    }
    Matcher& m = at.normalized && !at.special ? t->normalized_matcher_ : t->raw_matcher_;
    m.by_first_byte[static_cast<unsigned char>(at.content[0])].push_back(&at);
  }
  for (Matcher* m : {&t->raw_matcher_, &t->normalized_matcher_}) {
    for (auto& v : m->by_first_byte) {
      std::stable_sort(v.begin(), v.end(),
                       [](const AddedToken* x, const AddedToken* y) { return x->content.size() > y->content.size(); });
    }
  }
  if (!config_text.empty()) {
    RS_ASSIGN_OR_RETURN(json c, ParseJson(config_text, "tokenizer_config.json"));
    RS_RETURN_IF_ERROR(ReadConfig(c, &t->config_));
  }
  return std::shared_ptr<const Tokenizer>(std::move(t));
}

std::vector<Tokenizer::Piece> Tokenizer::FindAdded(std::string_view s, const Matcher& m) const {
  std::vector<Piece> out;
  if (s.empty()) {
    out.push_back({std::nullopt, {0, 0}});
    return out;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    // Leftmost-longest: the first position where any token matches.
    const AddedToken* hit = nullptr;
    size_t at = pos;
    for (; at < s.size(); ++at) {
      const auto& cands = m.by_first_byte[static_cast<unsigned char>(s[at])];
      for (const AddedToken* c : cands) {
        if (s.compare(at, c->content.size(), c->content) == 0) {
          hit = c;
          break;
        }
      }
      if (hit) break;
    }
    if (!hit) break;
    size_t start = at, stop = at + hit->content.size();
    pos = stop;
    if (hit->single_word) {
      const bool start_ok = start == 0 || !IsWordChar(LastChar(s.substr(0, start)));
      size_t n;
      const bool stop_ok = stop == s.size() || !IsWordChar(DecodeUtf8(s, stop, &n));
      if (!start_ok || !stop_ok) continue;
    }
    if (hit->lstrip) {
      size_t ns = start;
      while (ns > 0) {
        size_t b = ns - 1;
        while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
        size_t n;
        if (!IsWhitespace(DecodeUtf8(s, b, &n))) break;
        ns = b;
      }
      start = std::max(ns, start_offset);
    }
    if (hit->rstrip) {
      while (stop < s.size()) {
        size_t n;
        if (!IsWhitespace(DecodeUtf8(s, stop, &n))) break;
        stop += n;
      }
      pos = stop;
    }
    if (start_offset < start) out.push_back({std::nullopt, {start_offset, start}});
    out.push_back({hit->id, {start, stop}});
    start_offset = stop;
  }
  if (start_offset != s.size()) out.push_back({std::nullopt, {start_offset, s.size()}});
  return out;
}

Status Tokenizer::ExtractAndNormalize(std::string_view text, PreTokenizedString* pts) const {
  pts->splits.clear();
  pts->splits.push_back({NormalizedString(text), std::nullopt});
  // Two passes, as the reference: tokens matched on the raw text first,
  // then normalization and the tokens matched on normalized text.
  auto pass = [&](const Matcher& m, bool normalize) -> Status {
    std::vector<Split> out;
    for (Split& s : pts->splits) {
      if (s.tokens) {
        out.push_back(std::move(s));
        continue;
      }
      if (normalize && normalizer_) RS_RETURN_IF_ERROR(normalizer_->Normalize(s.normalized));
      if (m.empty()) {
        if (!s.normalized.empty()) out.push_back(std::move(s));
        continue;
      }
      for (const Piece& p : FindAdded(s.normalized.get(), m)) {
        if (p.offsets.start == p.offsets.end) continue;
        Split piece{s.normalized.Slice(p.offsets.start, p.offsets.end), std::nullopt};
        if (p.id) piece.tokens = std::vector<Token>{{*p.id, {0, piece.normalized.size()}}};
        out.push_back(std::move(piece));
      }
    }
    pts->splits = std::move(out);
    return Status::Ok();
  };
  RS_RETURN_IF_ERROR(pass(raw_matcher_, false));
  return pass(normalized_matcher_, true);
}

StatusOr<Encoding> Tokenizer::EncodeSequence(std::string_view text, std::uint32_t type_id, int sequence_id) const {
  RS_RETURN_IF_ERROR(CheckUtf8(text, "input text"));
  PreTokenizedString pts;
  RS_RETURN_IF_ERROR(ExtractAndNormalize(text, &pts));
  if (pre_tokenizer_) RS_RETURN_IF_ERROR(pre_tokenizer_->PreTokenize(pts));
  const CharIndex chars(text);
  Encoding e;
  std::vector<Token> toks;
  std::int64_t word = 0;
  for (Split& s : pts.splits) {
    const std::int64_t word_id = word++;  // every split is a word, added tokens too (as the reference)
    const bool added = s.tokens.has_value();
    if (!added) {
      toks.clear();
      RS_RETURN_IF_ERROR(model_->Tokenize(s.normalized.get(), &toks));
    }
    const std::vector<Token>& list = added ? *s.tokens : toks;
    for (const Token& t : list) {
      e.ids.push_back(t.id);
      e.type_ids.push_back(type_id);
      if (added) {
        e.tokens.push_back(s.normalized.get());
      } else {
        const std::string* str = IdToToken(t.id);
        e.tokens.push_back(str ? *str : std::string());
      }
      e.offsets.push_back(chars.Convert(s.normalized.ToOriginal(t.offsets)));
      e.special_tokens_mask.push_back(0);
      e.sequence_ids.push_back(sequence_id);
      e.words.push_back(word_id);
    }
  }
  return e;
}

StatusOr<Encoding> Tokenizer::PostProcess(Encoding a, std::optional<Encoding> b, bool add_special,
                                          const std::optional<Truncation>& truncation) const {
  if (truncation) {
    Truncation t = *truncation;
    const size_t added = add_special ? NumAddedTokens(b.has_value()) : 0;
    if (added > 0) {
      if (t.max_length <= added) {
        return InvalidArgument("max_length (" + std::to_string(t.max_length) + ") leaves no room next to the " +
                               std::to_string(added) + " special tokens");
      }
      t.max_length -= added;
    }
    RS_RETURN_IF_ERROR(TruncatePair(a, b, t));
  }
  std::vector<Encoding> encs;
  encs.push_back(std::move(a));
  if (b) encs.push_back(std::move(*b));
  if (post_) {
    RS_ASSIGN_OR_RETURN(encs, post_->ProcessEncodings(std::move(encs), add_special));
  }
  Encoding merged = Encoding::Merge(std::move(encs));
  return merged;
}

StatusOr<Encoding> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  RS_ASSIGN_OR_RETURN(Encoding a, EncodeSequence(text, 0, 0));
  return PostProcess(std::move(a), std::nullopt, add_special_tokens, truncation_);
}

StatusOr<Encoding> Tokenizer::Encode(std::string_view text, bool add_special_tokens,
                                     const Truncation& truncation) const {
  RS_ASSIGN_OR_RETURN(Encoding a, EncodeSequence(text, 0, 0));
  return PostProcess(std::move(a), std::nullopt, add_special_tokens, truncation);
}

StatusOr<Encoding> Tokenizer::EncodePair(std::string_view first, std::string_view second, bool add_special_tokens,
                                         const std::optional<Truncation>& truncation) const {
  RS_ASSIGN_OR_RETURN(Encoding a, EncodeSequence(first, 0, 0));
  RS_ASSIGN_OR_RETURN(Encoding b, EncodeSequence(second, 1, 1));
  return PostProcess(std::move(a), std::move(b), add_special_tokens, truncation ? truncation : truncation_);
}

std::optional<TokenId> Tokenizer::TokenToId(const std::string& token) const {
  if (auto it = added_by_content_.find(token); it != added_by_content_.end()) return it->second;
  return model_->TokenToId(token);
}

const std::string* Tokenizer::IdToToken(TokenId id) const {
  if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return &it->second->content;
  return model_->IdToToken(id);
}

StatusOr<std::string> Tokenizer::Decode(const std::vector<TokenId>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (TokenId id : ids) {
    const std::string* t = IdToToken(id);
    if (t == nullptr) {
      return InvalidArgument("token id " + std::to_string(id) + " is not in the vocabulary (size " +
                             std::to_string(vocab_size_) + ")");
    }
    if (skip_special && IsSpecial(id)) continue;
    tokens.push_back(*t);
  }
  return DecodeTokens(std::move(tokens));
}

StatusOr<std::string> Tokenizer::DecodeTokens(std::vector<std::string> tokens) const {
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  RS_RETURN_IF_ERROR(decoder_->DecodeChain(tokens));
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::optional<TokenId> Tokenizer::UnkId() const {
  return config_.unk_token ? TokenToId(*config_.unk_token) : std::nullopt;
}

std::optional<std::string> Tokenizer::TokenBytes(TokenId id) const {
  if (IsSpecial(id)) return std::nullopt;
  const std::string* t = IdToToken(id);
  if (t == nullptr) return std::nullopt;
  if (!decoder_) return " " + *t;  // Decode joins tokens with spaces
  std::string bytes = *t;
  decoder_->TokenBytes(bytes);
  return bytes;
}

// ------------------------------------------------------- incremental decode

}  // namespace ropeserve::tok
