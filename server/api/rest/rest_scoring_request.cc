// Reading /classify (vLLM), /predict (TEI), /score (vLLM), /rerank
// (vLLM's Jina/Cohere shape, or TEI's) and /v1/token-classify bodies
// (docs/classification.md).
// Model-free (the fuzz target links it).
#include "server/api/rest/json_fields.h"
#include "server/api/rest/rest_request.h"

namespace ropeserve::api {

namespace {

constexpr Rule kClassifyRules[] = {
    {"model", Kind::kRead},      {"input", Kind::kRead},
    {"user", Kind::kIgnored},    {"priority", Kind::kIgnored},
    {"activation", Kind::kRead},  // vLLM: false returns the raw logits
    {"softmax", Kind::kRead},     // vLLM's older name of `activation`
    {"truncate", Kind::kRead},   {"truncate_prompt_tokens", Kind::kUnsupported, &NotNull},
};
constexpr Rule kPredictRules[] = {
    {"model", Kind::kRead},
    {"inputs", Kind::kRead},
    {"raw_scores", Kind::kRead},
    {"truncate", Kind::kRead},
    {"truncation_direction", Kind::kRead},
};
constexpr Rule kScoreRules[] = {
    {"model", Kind::kRead},       {"text_1", Kind::kRead},
    {"text_2", Kind::kRead},      {"user", Kind::kIgnored},
    {"priority", Kind::kIgnored}, {"activation", Kind::kRead},
    {"truncate", Kind::kRead},    {"truncate_prompt_tokens", Kind::kUnsupported, &NotNull},
};
constexpr Rule kRerankRules[] = {
    {"model", Kind::kRead},
    {"query", Kind::kRead},
    {"documents", Kind::kRead},
    {"top_n", Kind::kRead},
    {"return_documents", Kind::kRead},  // Cohere / Jina
    {"user", Kind::kIgnored},
    {"priority", Kind::kIgnored},
    {"activation", Kind::kRead},
    {"truncate", Kind::kRead},
    {"truncate_prompt_tokens", Kind::kUnsupported, &NotNull},
    {"max_chunks_per_doc", Kind::kUnsupported, &NotNull},  // Cohere v1: documents are not chunked
};
constexpr Rule kTeiRerankRules[] = {
    {"model", Kind::kRead},
    {"query", Kind::kRead},
    {"texts", Kind::kRead},
    {"raw_scores", Kind::kRead},
    {"return_text", Kind::kRead},
    {"truncate", Kind::kRead},
    {"truncation_direction", Kind::kRead},
};

constexpr Rule kTokenClassifyRules[] = {
    {"model", Kind::kRead},
    {"input", Kind::kRead},
    {"aggregation_strategy", Kind::kRead},
    {"ignore_labels", Kind::kRead},
    {"offset_unit", Kind::kRead},
    {"truncate", Kind::kRead},
    {"truncation_direction", Kind::kRead},
    {"user", Kind::kIgnored},
    {"priority", Kind::kIgnored},
    {"stride", Kind::kUnsupported, &NotNull},  // transformers: overlapping windows of a long text
};

Status Required(const ojson& body, const char* key) {
  if (!body.contains(key) || body[key].is_null()) return Malformed(key, std::string("'") + key + "' is required");
  return Status::Ok();
}

// A string, or a non-empty list of strings (a Jina / Cohere document may
// be {"text": "..."}, `objects` says so).
Status ReadTexts(const ojson& v, const std::string& key, std::vector<std::string>& out, bool objects = false) {
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
    return Status::Ok();
  }
  const std::string shape = objects ? "a list of strings or of {\"text\": string}" : "a string or a list of strings";
  if (!v.is_array() || v.empty()) return Malformed(key, "'" + key + "' must be " + shape + ", and not empty");
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string at = key + "[" + std::to_string(i) + "]";
    if (v[i].is_string()) {
      out.push_back(v[i].get<std::string>());
    } else if (objects && v[i].is_object() && v[i].size() == 1 && v[i].contains("text") && v[i]["text"].is_string()) {
      out.push_back(v[i]["text"].get<std::string>());
    } else {
      return Malformed(at, "'" + key + "' must be " + shape);
    }
  }
  return Status::Ok();
}

// TEI's "truncation_direction": "Right" or "Left" (lower case accepted too).
Status ReadDirection(const ojson& body, bool& left) {
  std::optional<std::string> direction;
  RS_RETURN_IF_ERROR(Read(body, "truncation_direction", direction));
  if (direction && *direction != "Right" && *direction != "Left" && *direction != "right" && *direction != "left")
    return Malformed("truncation_direction", "'truncation_direction' must be \"Right\" or \"Left\"");
  left = direction && (*direction == "Left" || *direction == "left");
  return Status::Ok();
}

// vLLM's `activation` (or its older name `softmax`): false asks for the
// raw logits.
Status ReadActivation(const ojson& body, bool& raw) {
  std::optional<bool> activation, softmax;
  RS_RETURN_IF_ERROR(Read(body, "activation", activation));
  RS_RETURN_IF_ERROR(Read(body, "softmax", softmax));
  raw = !activation.value_or(softmax.value_or(true));
  return Status::Ok();
}

// One TEI sequence: a text, or [text, text] (a pair).
bool TeiSequence(const ojson& v, service::EncoderInput& out) {
  if (v.is_string()) {
    out = service::EncoderInput::Text(v.get<std::string>());
    return true;
  }
  if (v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string()) {
    out = service::EncoderInput::Pair(v[0].get<std::string>(), v[1].get<std::string>());
    return true;
  }
  return false;
}

}  // namespace

StatusOr<ClassifyBody> ReadClassifyBody(const std::string& text, bool tei) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  ClassifyBody out;
  out.tei = tei;
  RS_RETURN_IF_ERROR(ReadInto(body, "model", out.model));
  RS_RETURN_IF_ERROR(ReadInto(body, "truncate", out.options.truncate));
  if (tei) {
    RS_RETURN_IF_ERROR(CheckFields(body, kPredictRules));
    RS_RETURN_IF_ERROR(Required(body, "inputs"));
    const ojson& v = body["inputs"];
    // As TEI reads it: one sequence (a text or a pair of texts), else a
    // batch of sequences.
    service::EncoderInput one;
    if (TeiSequence(v, one)) {
      out.inputs.push_back(std::move(one));
    } else if (v.is_array() && !v.empty()) {
      out.tei_batch = true;
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (!TeiSequence(v[i], one))
          return Malformed("inputs[" + std::to_string(i) + "]", "an input is a text or a pair [text, text]");
        out.inputs.push_back(std::move(one));
      }
    } else {
      return Malformed("inputs", "'inputs' must be a text, a pair [text, text], or a non-empty list of those");
    }
    std::optional<bool> raw;
    RS_RETURN_IF_ERROR(Read(body, "raw_scores", raw));
    if (raw.value_or(false)) out.options.activation = service::ClassifyOptions::Activation::kNone;
    RS_RETURN_IF_ERROR(ReadDirection(body, out.options.truncate_left));
    return out;
  }
  RS_RETURN_IF_ERROR(CheckFields(body, kClassifyRules));
  RS_RETURN_IF_ERROR(Required(body, "input"));
  std::vector<std::string> texts;
  RS_RETURN_IF_ERROR(ReadTexts(body["input"], "input", texts));
  for (std::string& t : texts) out.inputs.push_back(service::EncoderInput::Text(std::move(t)));
  bool raw = false;
  RS_RETURN_IF_ERROR(ReadActivation(body, raw));
  if (raw) out.options.activation = service::ClassifyOptions::Activation::kNone;
  return out;
}

StatusOr<TokenClassifyBody> ReadTokenClassifyBody(const std::string& text) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  RS_RETURN_IF_ERROR(CheckFields(body, kTokenClassifyRules));
  TokenClassifyBody out;
  RS_RETURN_IF_ERROR(ReadInto(body, "model", out.model));
  RS_RETURN_IF_ERROR(Required(body, "input"));
  std::vector<std::string> texts;
  RS_RETURN_IF_ERROR(ReadTexts(body["input"], "input", texts));
  for (std::string& t : texts) out.inputs.push_back(service::EncoderInput::Text(std::move(t)));
  std::optional<std::string> aggregation, unit;
  RS_RETURN_IF_ERROR(Read(body, "aggregation_strategy", aggregation));
  if (aggregation) {
    const auto a = qa::ParseAggregation(*aggregation);
    if (!a)
      return Malformed("aggregation_strategy",
                       "'aggregation_strategy' must be \"none\", \"simple\", \"first\", \"max\" or \"average\"");
    out.options.aggregation = *a;
  }
  if (body.contains("ignore_labels") && !body["ignore_labels"].is_null()) {
    const ojson& v = body["ignore_labels"];
    if (!v.is_array()) return Malformed("ignore_labels", "'ignore_labels' must be a list of labels");
    out.options.ignore_labels.clear();
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string())
        return Malformed("ignore_labels[" + std::to_string(i) + "]", "'ignore_labels' must be a list of labels");
      out.options.ignore_labels.push_back(v[i].get<std::string>());
    }
  }
  RS_RETURN_IF_ERROR(Read(body, "offset_unit", unit));
  if (unit) {
    const auto u = qa::ParseOffsetUnit(*unit);
    if (!u) return Malformed("offset_unit", "'offset_unit' must be \"code_point\", \"utf16\" or \"utf8_byte\"");
    out.offset_unit = *u;
  }
  RS_RETURN_IF_ERROR(ReadInto(body, "truncate", out.options.truncate));
  RS_RETURN_IF_ERROR(ReadDirection(body, out.options.truncate_left));
  return out;
}

StatusOr<ScoreBody> ReadScoreBody(const std::string& text, bool rerank) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  ScoreBody out;
  RS_RETURN_IF_ERROR(ReadInto(body, "model", out.model));
  RS_RETURN_IF_ERROR(ReadInto(body, "truncate", out.options.truncate));
  if (!rerank) {
    RS_RETURN_IF_ERROR(CheckFields(body, kScoreRules));
    RS_RETURN_IF_ERROR(Required(body, "text_1"));
    RS_RETURN_IF_ERROR(Required(body, "text_2"));
    RS_RETURN_IF_ERROR(ReadTexts(body["text_1"], "text_1", out.queries));
    RS_RETURN_IF_ERROR(ReadTexts(body["text_2"], "text_2", out.documents));
    // vLLM: 1 to 1, 1 to N, or N to N pairwise.
    if (out.queries.size() != 1 && out.queries.size() != out.documents.size())
      return Malformed("text_1", "'text_1' holds one text or as many as 'text_2' (" +
                                     std::to_string(out.documents.size()) + "), got " +
                                     std::to_string(out.queries.size()));
    RS_RETURN_IF_ERROR(ReadActivation(body, out.options.raw));
    return out;
  }
  RS_RETURN_IF_ERROR(Required(body, "query"));
  std::optional<std::string> query;
  RS_RETURN_IF_ERROR(Read(body, "query", query));
  out.queries.push_back(*query);
  if (body.contains("texts")) {  // TEI's shape
    out.shape = ScoreBody::Shape::kTeiRerank;
    RS_RETURN_IF_ERROR(CheckFields(body, kTeiRerankRules));
    if (!body["texts"].is_array()) return Malformed("texts", "'texts' must be a non-empty list of strings");
    RS_RETURN_IF_ERROR(ReadTexts(body["texts"], "texts", out.documents));
    std::optional<bool> raw, return_text;
    RS_RETURN_IF_ERROR(Read(body, "raw_scores", raw));
    RS_RETURN_IF_ERROR(Read(body, "return_text", return_text));
    out.options.raw = raw.value_or(false);
    out.return_documents = return_text.value_or(false);
    RS_RETURN_IF_ERROR(ReadDirection(body, out.options.truncate_left));
    return out;
  }
  out.shape = ScoreBody::Shape::kRerank;
  RS_RETURN_IF_ERROR(CheckFields(body, kRerankRules));
  RS_RETURN_IF_ERROR(Required(body, "documents"));
  if (!body["documents"].is_array())
    return Malformed("documents", "'documents' must be a non-empty list of strings or of {\"text\": string}");
  RS_RETURN_IF_ERROR(ReadTexts(body["documents"], "documents", out.documents, /*objects=*/true));
  RS_RETURN_IF_ERROR(ReadInto(body, "top_n", out.top_n));
  if (out.top_n < 0) return Malformed("top_n", "'top_n' must be 0 (all) or positive");
  RS_RETURN_IF_ERROR(ReadInto(body, "return_documents", out.return_documents));
  RS_RETURN_IF_ERROR(ReadActivation(body, out.options.raw));
  return out;
}

}  // namespace ropeserve::api
