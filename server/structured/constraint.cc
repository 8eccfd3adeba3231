#include "server/structured/constraint.h"

#include <nlohmann/json.hpp>

#include "server/structured/json_schema.h"
#include "server/structured/regex.h"

namespace ropeserve::structured {

std::string Constraint::CacheKey() const {
  std::string key = std::to_string(static_cast<int>(kind)) + ":" + text;
  for (const auto& c : choices) key += "\x1F" + std::to_string(c.size()) + ":" + c;
  return key;
}

StatusOr<Expr> ConstraintExpr(const Constraint& c) {
  switch (c.kind) {
    case Constraint::Kind::kNone:
      return InvalidArgument("no constraint");
    case Constraint::Kind::kJsonObject:
      return AnyJsonObjectExpr();
    case Constraint::Kind::kJsonSchema: {
      nlohmann::ordered_json schema;  // properties keep the schema's order
      try {
        schema = nlohmann::ordered_json::parse(c.text);
      } catch (const std::exception& e) {
        return InvalidArgument(std::string("the JSON schema is not valid JSON: ") + e.what());
      }
      return JsonSchemaExpr(schema);
    }
    case Constraint::Kind::kRegex: {
      RS_ASSIGN_OR_RETURN(ParsedRegex r, ParseRegex(c.text));
      return r.expr;  // the whole output matches, anchored or not (as vLLM)
    }
    case Constraint::Kind::kChoice: {
      if (c.choices.empty()) return InvalidArgument("the list of choices is empty");
      std::vector<Expr> options;
      for (const auto& s : c.choices) {
        if (s.empty()) return InvalidArgument("a choice must not be empty");
        options.push_back(Expr::Literal(s));
      }
      return Expr::Alt(std::move(options));
    }
  }
  return InvalidArgument("unknown constraint kind");
}

}  // namespace ropeserve::structured
