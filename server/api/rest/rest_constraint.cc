#include "server/api/rest/rest_constraint.h"

#include "server/common/json_text.h"
#include "server/service/request_params.h"

namespace ropeserve::api {

using ojson = nlohmann::ordered_json;

Status ReadConstraint(const ojson& body, structured::Constraint& c) {
  using K = structured::Constraint::Kind;
  int given = 0;
  auto schema = [&](const ojson& v, const std::string& param) -> Status {
    ojson s = v;
    if (v.is_string()) {
      s = ojson::parse(v.get<std::string>(), nullptr, false);
      if (s.is_discarded())
        return Malformed(param, "'" + param + "' must be a JSON Schema (an object or its JSON text)");
    }
    if (!s.is_object() && !s.is_boolean()) return Malformed(param, "'" + param + "' must be a JSON Schema object");
    c = {K::kJsonSchema, s.dump(), {}, param};
    ++given;
    return Status::Ok();
  };
  auto regex = [&](const ojson& v, const std::string& param) -> Status {
    if (!v.is_string()) return Malformed(param, "'" + param + "' must be a regular expression (a string)");
    c = {K::kRegex, v.get<std::string>(), {}, param};
    ++given;
    return Status::Ok();
  };
  auto choice = [&](const ojson& v, const std::string& param) -> Status {
    // The limits (1 to kMaxGuidedChoices non-empty strings) are the
    // validator's (request_params.cc); this reads the shape.
    if (!v.is_array()) return Malformed(param, "'" + param + "' must be a list of strings");
    c = {K::kChoice, "", {}, param};
    for (const auto& x : v) {
      if (!x.is_string()) return Malformed(param, "'" + param + "' must be a list of strings");
      c.choices.push_back(x.get<std::string>());
    }
    ++given;
    return Status::Ok();
  };
  if (auto rf = body.find("response_format"); rf != body.end() && !rf->is_null()) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      return Malformed("response_format", "'response_format' must be an object with a string 'type'");
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      c = {K::kJsonObject, "", {}, "response_format"};
      ++given;
    } else if (type == "json_schema") {
      auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object() || !js->contains("schema"))
        return Malformed("response_format",
                         "'response_format' of type json_schema needs 'json_schema': {\"name\", \"schema\"}");
      RS_RETURN_IF_ERROR(schema((*js)["schema"], "response_format"));
    } else if (type != "text") {
      return Malformed("response_format", "'response_format' type must be text, json_object or json_schema, not '" +
                                              type.substr(0, 50) + "'");
    }
  }
  if (auto v = body.find("guided_json"); v != body.end() && !v->is_null())
    RS_RETURN_IF_ERROR(schema(*v, "guided_json"));
  if (auto v = body.find("guided_regex"); v != body.end() && !v->is_null())
    RS_RETURN_IF_ERROR(regex(*v, "guided_regex"));
  if (auto v = body.find("guided_choice"); v != body.end() && !v->is_null())
    RS_RETURN_IF_ERROR(choice(*v, "guided_choice"));
  if (auto so = body.find("structured_outputs"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return Malformed("structured_outputs", "'structured_outputs' must be an object");
    for (auto it = so->begin(); it != so->end(); ++it) {
      const std::string param = "structured_outputs." + it.key().substr(0, 50);
      if (it.value().is_null()) continue;
      if (it.key() == "json")
        RS_RETURN_IF_ERROR(schema(it.value(), param));
      else if (it.key() == "regex")
        RS_RETURN_IF_ERROR(regex(it.value(), param));
      else if (it.key() == "choice")
        RS_RETURN_IF_ERROR(choice(it.value(), param));
      else if (it.key() == "json_object") {
        if (!it.value().is_boolean()) return Malformed(param, "'" + param + "' must be a boolean");
        if (it.value().get<bool>()) {
          c = {K::kJsonObject, "", {}, param};
          ++given;
        }
      } else if (it.key() == "grammar" || it.key() == "structural_tag") {
        return Malformed(param, "'" + param + "' is not supported by this server (JSON Schema, regex and choice are)")
            .WithReason("unsupported_parameter");
      } else if (it.key() != "disable_any_whitespace" && it.key() != "disable_additional_properties" &&
                 it.key() != "whitespace_pattern") {
        return Malformed(param, "unrecognized structured output option: '" + it.key().substr(0, 50) + "'")
            .WithReason("unknown_parameter");
      }
    }
  }
  if (given > 1)
    return Malformed(c.param,
                     "give one of response_format, guided_json, guided_regex, guided_choice, structured_outputs");
  return Status::Ok();
}

}  // namespace ropeserve::api
