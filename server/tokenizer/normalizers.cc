// Normalizers and pre-tokenizers (tokenizer.json "normalizer" and
// "pre_tokenizer").
#include <nlohmann/json.hpp>

#include "server/tokenizer/component_json.h"
#include "server/tokenizer/components.h"
#include "server/tokenizer/pattern.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::tok {

using nlohmann::json;

// A "pattern" object: {"String": "..."} or {"Regex": "..."}.
StatusOr<std::shared_ptr<Pattern>> MakePattern(const json& j, const std::string& where) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    return std::shared_ptr<Pattern>(std::make_shared<StringPattern>(j["String"].get<std::string>()));
  }
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    RS_ASSIGN_OR_RETURN(auto re, Regex::Compile(j["Regex"].get<std::string>()));
    return std::shared_ptr<Pattern>(re);
  }
  return Bad(where, "'pattern' must be {\"String\": ...} or {\"Regex\": ...}");
}

namespace {

// ---------------------------------------------------------------- normalizers

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm f) : form_(f) {}
  Status Normalize(NormalizedString& s) const override {
    s.NormalizeUnicode(static_cast<int>(form_));
    return Status::Ok();
  }

 private:
  NormalForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  Status Normalize(NormalizedString& s) const override {
    s.Lowercase();
    return Status::Ok();
  }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool l, bool r) : left_(l), right_(r) {}
  Status Normalize(NormalizedString& s) const override {
    s.Strip(left_, right_);
    return Status::Ok();
  }

 private:
  bool left_, right_;
};

class StripAccentsNormalizer final : public Normalizer {
 public:
  Status Normalize(NormalizedString& s) const override {
    s.Filter([](char32_t c) { return !IsMark(c); });
    return Status::Ok();
  }
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::shared_ptr<Pattern> p, std::string content)
      : pattern_(std::move(p)), content_(std::move(content)) {}
  Status Normalize(NormalizedString& s) const override { return s.Replace(*pattern_, content_); }

 private:
  std::shared_ptr<Pattern> pattern_;
  std::string content_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prepend_(std::move(p)) {}
  Status Normalize(NormalizedString& s) const override {
    s.Prepend(prepend_);
    return Status::Ok();
  }

 private:
  std::string prepend_;
};

class AppendNormalizer final : public Normalizer {
 public:
  explicit AppendNormalizer(std::string a) : append_(std::move(a)) {}
  Status Normalize(NormalizedString& s) const override {
    s.Append(append_);
    return Status::Ok();
  }

 private:
  std::string append_;
};

class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, std::optional<bool> strip, bool lower)
      : clean_(clean), chinese_(chinese), strip_accents_(strip.value_or(lower)), lower_(lower) {}
  Status Normalize(NormalizedString& s) const override {
    if (clean_) {
      s.Filter([](char32_t c) { return !(c == 0 || c == 0xFFFD || IsBertControl(c)); });
      s.MapChars([](char32_t c) { return std::u32string(1, IsWhitespace(c) ? U' ' : c); });
    }
    if (chinese_) {
      std::vector<CharChange> dest;
      bool any = false;
      const std::string& n = s.get();
      for (size_t i = 0; i < n.size();) {
        size_t len;
        const char32_t c = DecodeUtf8(n, i, &len);
        i += len;
        if (IsChineseChar(c)) {
          any = true;
          dest.push_back({U' ', 0});
          dest.push_back({c, 1});
          dest.push_back({U' ', 1});
        } else {
          dest.push_back({c, 0});
        }
      }
      if (any) s.Transform(dest, 0);
    }
    if (strip_accents_) {
      s.NormalizeUnicode(static_cast<int>(NormalForm::kNFD));
      s.Filter([](char32_t c) { return !IsNonspacingMark(c); });
    }
    if (lower_) s.Lowercase();
    return Status::Ok();
  }

 private:
  bool clean_, chinese_, strip_accents_, lower_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> n) : parts_(std::move(n)) {}
  Status Normalize(NormalizedString& s) const override {
    for (const auto& p : parts_) RS_RETURN_IF_ERROR(p->Normalize(s));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> MakeNormalizer(const json& j) {
  const std::string type = TypeOf(j);
  const std::string where = "normalizer " + (type.empty() ? std::string("(no type)") : type);
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNFC));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNFD));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNFKC));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNFKD));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "Strip") {
    RS_ASSIGN_OR_RETURN(bool l, JsonReader(j, where).Bool("strip_left", true));
    RS_ASSIGN_OR_RETURN(bool r, JsonReader(j, where).Bool("strip_right", true));
    return std::unique_ptr<Normalizer>(new StripNormalizer(l, r));
  }
  if (type == "Replace") {
    if (!j.contains("pattern")) return Bad(where, "missing 'pattern'");
    RS_ASSIGN_OR_RETURN(auto p, MakePattern(j["pattern"], where));
    RS_ASSIGN_OR_RETURN(std::string content, JsonReader(j, where).String("content"));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(p), std::move(content)));
  }
  if (type == "Prepend") {
    RS_ASSIGN_OR_RETURN(std::string p, JsonReader(j, where).String("prepend"));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(p)));
  }
  if (type == "Append") {
    RS_ASSIGN_OR_RETURN(std::string a, JsonReader(j, where).String("append"));
    return std::unique_ptr<Normalizer>(new AppendNormalizer(std::move(a)));
  }
  if (type == "BertNormalizer") {
    RS_ASSIGN_OR_RETURN(bool clean, JsonReader(j, where).Bool("clean_text", true));
    RS_ASSIGN_OR_RETURN(bool chinese, JsonReader(j, where).Bool("handle_chinese_chars", true));
    RS_ASSIGN_OR_RETURN(bool lower, JsonReader(j, where).Bool("lowercase", true));
    std::optional<bool> strip;
    if (j.contains("strip_accents") && !j["strip_accents"].is_null()) {
      if (!j["strip_accents"].is_boolean()) return Bad(where, "'strip_accents' must be a boolean or null");
      strip = j["strip_accents"].get<bool>();
    }
    return std::unique_ptr<Normalizer>(new BertNormalizer(clean, chinese, strip, lower));
  }
  if (type == "Sequence") {
    RS_ASSIGN_OR_RETURN(const json* arr, JsonReader(j, where).Array("normalizers"));
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const json& sub : *arr) {
      RS_ASSIGN_OR_RETURN(auto n, MakeNormalizer(sub));
      parts.push_back(std::move(n));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  if (type.empty()) return Bad("normalizer", "object without a 'type'");
  return Unimplemented("normalizer: unsupported type '" + type + "'");
}

}  // namespace ropeserve::tok
