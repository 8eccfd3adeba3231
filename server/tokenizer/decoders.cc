// Decoders (tokenizer.json "decoder"): ids' token strings back to text.
#include <nlohmann/json.hpp>

#include "server/tokenizer/component_json.h"
#include "server/tokenizer/components.h"
#include "server/tokenizer/pattern.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::tok {

using nlohmann::json;

StatusOr<std::shared_ptr<Pattern>> MakePattern(const json& j, const std::string& where);

namespace {

// ------------------------------------------------------------------ decoders

class ByteLevelDecoder final : public Decoder {
 public:
  void TokenBytes(std::string& t) const override {
    std::string bytes;
    for (size_t k = 0; k < t.size();) {
      size_t n;
      const int b = CharToByte(DecodeUtf8(t, k, &n));
      if (b < 0) return;  // not a byte-level token: left as it is (as DecodeChain does)
      bytes.push_back(static_cast<char>(b));
      k += n;
    }
    t = std::move(bytes);
  }
  Status DecodeChain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t before = bytes.size();
      bool ok = true;
      for (size_t k = 0; k < t.size() && ok;) {
        size_t n;
        const int b = CharToByte(DecodeUtf8(t, k, &n));
        k += n;
        if (b < 0)
          ok = false;
        else
          bytes.push_back(static_cast<char>(b));
      }
      if (!ok) {
        bytes.resize(before);
        bytes += t;
      }
    }
    tokens.assign(1, Utf8Lossy(bytes));
    return Status::Ok();
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  void TokenBytes(std::string& t) const override {
    std::string out;
    for (size_t k = 0; k < t.size();) {
      if (t.compare(k, rep_.size(), rep_) == 0) {
        out.push_back(' ');
        k += rep_.size();
      } else {
        out.push_back(t[k++]);
      }
    }
    t = std::move(out);
  }
  MetaspaceDecoder(std::string rep, bool prepend) : rep_(std::move(rep)), prepend_(prepend) {}
  Status DecodeChain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, rep_.size(), rep_) == 0) {
          if (!(i == 0 && prepend_)) out.push_back(' ');
          k += rep_.size();
        } else {
          out.push_back(t[k++]);
        }
      }
      tokens[i] = std::move(out);
    }
    return Status::Ok();
  }

 private:
  std::string rep_;
  bool prepend_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void TokenBytes(std::string& t) const override {
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
        std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4])))
      t = std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
  }
  Status DecodeChain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      if (FindInvalidUtf8(pending) == std::string::npos) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending_count; ++k) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
      pending_count = 0;
    };
    for (std::string& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
          std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4]))) {
        byte = std::stoi(t.substr(3, 2), nullptr, 16);
      }
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
        ++pending_count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
    return Status::Ok();
  }
};

class FuseDecoder final : public Decoder {
 public:
  Status DecodeChain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
    return Status::Ok();
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  Status DecodeChain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && t.compare(b, content_.size(), content_) == 0 && b < e; ++k) b += content_.size();
      for (size_t k = 0;
           k < stop_ && e >= b + content_.size() && t.compare(e - content_.size(), content_.size(), content_) == 0;
           ++k) {
        e -= content_.size();
      }
      t = t.substr(b, e - b);
    }
    return Status::Ok();
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  void TokenBytes(std::string& t) const override {
    std::vector<std::string> one{t};
    if (DecodeChain(one).ok()) t = std::move(one[0]);
  }
  ReplaceDecoder(std::shared_ptr<Pattern> p, std::string content)
      : pattern_(std::move(p)), content_(std::move(content)) {}
  Status DecodeChain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      RS_ASSIGN_OR_RETURN(auto ms, pattern_->FindMatches(t));
      std::string out;
      for (const auto& m : ms) {
        if (m.is_match)
          out += content_;
        else
          out.append(t, m.offsets.start, m.offsets.end - m.offsets.start);
      }
      t = std::move(out);
    }
    return Status::Ok();
  }

 private:
  std::shared_ptr<Pattern> pattern_;
  std::string content_;
};

std::string CleanupTokenization(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    const std::string f(from), t(to);
    std::string out;
    size_t pos = 0, hit;
    while ((hit = s.find(f, pos)) != std::string::npos) {
      out.append(s, pos, hit - pos);
      out += t;
      pos = hit + f.size();
    }
    out.append(s, pos, std::string::npos);
    s = std::move(out);
  }
  return s;
}

class WordPieceDecoder final : public Decoder {
 public:
  void TokenBytes(std::string& t) const override {
    if (t.compare(0, prefix_.size(), prefix_) == 0)
      t = t.substr(prefix_.size());
    else
      t = " " + t;
  }
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  Status DecodeChain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0)
          t = t.substr(prefix_.size());
        else
          t = " " + t;
      }
      if (cleanup_) t = CleanupTokenization(std::move(t));
    }
    return Status::Ok();
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeSuffixDecoder final : public Decoder {
 public:
  void TokenBytes(std::string& t) const override {
    size_t hit;
    while (!suffix_.empty() && (hit = t.find(suffix_)) != std::string::npos) t.replace(hit, suffix_.size(), " ");
  }
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  Status DecodeChain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      const std::string rep = i + 1 == tokens.size() ? "" : " ";
      std::string out;
      size_t pos = 0, hit;
      while (!suffix_.empty() && (hit = t.find(suffix_, pos)) != std::string::npos) {
        out.append(t, pos, hit - pos);
        out += rep;
        pos = hit + suffix_.size();
      }
      out.append(t, pos, std::string::npos);
      t = std::move(out);
    }
    return Status::Ok();
  }

 private:
  std::string suffix_;
};

class SequenceDecoder final : public Decoder {
 public:
  void TokenBytes(std::string& t) const override {
    for (const auto& d : parts_) d->TokenBytes(t);
  }
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> d) : parts_(std::move(d)) {}
  Status DecodeChain(std::vector<std::string>& tokens) const override {
    for (const auto& d : parts_) RS_RETURN_IF_ERROR(d->DecodeChain(tokens));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

StatusOr<std::unique_ptr<Decoder>> MakeDecoder(const json& j) {
  const std::string type = TypeOf(j);
  const std::string where = "decoder " + type;
  using D = std::unique_ptr<Decoder>;
  if (type == "ByteLevel") return D(new ByteLevelDecoder());
  if (type == "ByteFallback") return D(new ByteFallbackDecoder());
  if (type == "Fuse") return D(new FuseDecoder());
  if (type == "Metaspace") {
    RS_ASSIGN_OR_RETURN(std::string rep, JsonReader(j, where).String("replacement", "\xE2\x96\x81"));
    bool prepend = true;
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      prepend = j["prepend_scheme"].get<std::string>() != "never";
    } else {
      RS_ASSIGN_OR_RETURN(prepend, JsonReader(j, where).Bool("add_prefix_space", true));
    }
    return D(new MetaspaceDecoder(rep, prepend));
  }
  if (type == "Strip") {
    RS_ASSIGN_OR_RETURN(std::string content, JsonReader(j, where).String("content", " "));
    RS_ASSIGN_OR_RETURN(long long start, JsonReader(j, where).Int("start", 0));
    RS_ASSIGN_OR_RETURN(long long stop, JsonReader(j, where).Int("stop", 0));
    if (start < 0 || stop < 0 || content.empty())
      return Bad(where, "'start'/'stop' must be >= 0 and 'content' non-empty");
    return D(new StripDecoder(content, static_cast<size_t>(start), static_cast<size_t>(stop)));
  }
  if (type == "Replace") {
    if (!j.contains("pattern")) return Bad(where, "missing 'pattern'");
    RS_ASSIGN_OR_RETURN(auto p, MakePattern(j["pattern"], where));
    RS_ASSIGN_OR_RETURN(std::string content, JsonReader(j, where).String("content"));
    return D(new ReplaceDecoder(std::move(p), std::move(content)));
  }
  if (type == "WordPiece") {
    RS_ASSIGN_OR_RETURN(std::string prefix, JsonReader(j, where).String("prefix", "##"));
    RS_ASSIGN_OR_RETURN(bool cleanup, JsonReader(j, where).Bool("cleanup", true));
    return D(new WordPieceDecoder(prefix, cleanup));
  }
  if (type == "BPEDecoder") {
    RS_ASSIGN_OR_RETURN(std::string suffix, JsonReader(j, where).String("suffix", "</w>"));
    return D(new BpeSuffixDecoder(suffix));
  }
  if (type == "Sequence") {
    RS_ASSIGN_OR_RETURN(const json* arr, JsonReader(j, where).Array("decoders"));
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const json& sub : *arr) {
      RS_ASSIGN_OR_RETURN(auto d, MakeDecoder(sub));
      parts.push_back(std::move(d));
    }
    return D(new SequenceDecoder(std::move(parts)));
  }
  if (type.empty()) return Bad("decoder", "object without a 'type'");
  return Unimplemented("decoder: unsupported type '" + type + "'");
}
}  // namespace ropeserve::tok
