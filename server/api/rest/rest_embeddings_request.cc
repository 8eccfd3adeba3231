// Reading /v1/embeddings (OpenAI) and /embed (TEI) bodies (docs/api.md).
// Model-free (the fuzz target links it).
#include <limits>

#include "server/api/rest/json_fields.h"
#include "server/api/rest/rest_request.h"

namespace ropeserve::api {

namespace {

constexpr Rule kOpenAiRules[] = {
    {"model", Kind::kRead},
    {"input", Kind::kRead},
    {"encoding_format", Kind::kRead},
    {"dimensions", Kind::kRead},
    {"user", Kind::kIgnored},
    {"normalize", Kind::kRead},
    {"truncate", Kind::kRead},
    {"prompt_name", Kind::kRead},
    // vLLM's: cut to the last N tokens; not implemented (truncate cuts to the model's limit).
    {"truncate_prompt_tokens", Kind::kUnsupported, &NotNull},
};
constexpr Rule kTeiRules[] = {
    {"model", Kind::kRead},
    {"inputs", Kind::kRead},
    {"normalize", Kind::kRead},
    {"truncate", Kind::kRead},
    {"truncation_direction", Kind::kRead},
    {"prompt_name", Kind::kRead},
    {"dimensions", Kind::kRead},
};

// One token id: a JSON integer within TokenId's range (the model checks
// its vocabulary).
Status ReadIds(const ojson& list, const std::string& where, std::vector<TokenId>& out) {
  for (std::size_t k = 0; k < list.size(); ++k) {
    const ojson& v = list[k];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
        v.get<std::int64_t>() > std::numeric_limits<TokenId>::max())
      return Malformed(where + "[" + std::to_string(k) + "]", "a token id is a non-negative integer");
    out.push_back(static_cast<TokenId>(v.get<std::int64_t>()));
  }
  return Status::Ok();
}

// A string, a list of strings, a list of token ids, or a list of lists of ids.
Status ReadInputs(const ojson& v, const std::string& key, std::vector<service::EncoderInput>& out) {
  const char* shape = "a string, a list of strings, a list of token ids or a list of lists of token ids";
  if (v.is_string()) {
    out.push_back(service::EncoderInput::Text(v.get<std::string>()));
    return Status::Ok();
  }
  if (!v.is_array() || v.empty()) return Malformed(key, "'" + key + "' must be " + shape + ", and not empty");
  if (v[0].is_number()) {  // one list of ids
    std::vector<TokenId> ids;
    RS_RETURN_IF_ERROR(ReadIds(v, key, ids));
    out.push_back(service::EncoderInput::Ids(std::move(ids)));
    return Status::Ok();
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string at = key + "[" + std::to_string(i) + "]";
    if (v[i].is_string()) {
      out.push_back(service::EncoderInput::Text(v[i].get<std::string>()));
    } else if (v[i].is_array()) {
      std::vector<TokenId> ids;
      RS_RETURN_IF_ERROR(ReadIds(v[i], at, ids));
      out.push_back(service::EncoderInput::Ids(std::move(ids)));
    } else {
      return Malformed(at, std::string("'") + key + "' must be " + shape);
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<EmbeddingsBody> ReadEmbeddingsBody(const std::string& text, bool tei) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  if (tei) {
    RS_RETURN_IF_ERROR(CheckFields(body, kTeiRules));
  } else {
    RS_RETURN_IF_ERROR(CheckFields(body, kOpenAiRules));
  }
  EmbeddingsBody out;
  out.tei = tei;
  RS_RETURN_IF_ERROR(ReadInto(body, "model", out.model));
  const char* key = tei ? "inputs" : "input";
  if (!body.contains(key) || body[key].is_null()) return Malformed(key, std::string("'") + key + "' is required");
  RS_RETURN_IF_ERROR(ReadInputs(body[key], key, out.inputs));
  RS_RETURN_IF_ERROR(ReadInto(body, "normalize", out.options.normalize));
  RS_RETURN_IF_ERROR(ReadInto(body, "truncate", out.options.truncate));
  RS_RETURN_IF_ERROR(Read(body, "prompt_name", out.options.prompt_name));
  RS_RETURN_IF_ERROR(Read(body, "dimensions", out.options.dimensions));
  if (out.options.dimensions && *out.options.dimensions < 1)
    return Malformed("dimensions", "'dimensions' must be a positive integer");
  std::optional<std::string> format, direction;
  RS_RETURN_IF_ERROR(Read(body, "encoding_format", format));
  if (format && *format != "float" && *format != "base64")
    return Malformed("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
  out.base64 = format && *format == "base64";
  RS_RETURN_IF_ERROR(Read(body, "truncation_direction", direction));
  // TEI spells them "Right" / "Left"; lower case is accepted too.
  if (direction && *direction != "Right" && *direction != "Left" && *direction != "right" && *direction != "left")
    return Malformed("truncation_direction", "'truncation_direction' must be \"Right\" or \"Left\"");
  out.options.truncate_left = direction && (*direction == "Left" || *direction == "left");
  return out;
}

}  // namespace ropeserve::api
