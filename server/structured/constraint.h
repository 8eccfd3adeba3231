// What a request asks its output to be: a JSON Schema, any JSON object, a
// regular expression or one of a list of strings. Transports fill it from
// their fields (REST response_format / guided_* / structured_outputs /
// tools, gRPC OutputConstraint); the grammar compiler turns it into a
// token-level automaton.
#pragma once

#include <string>
#include <vector>

#include "server/common/status.h"
#include "server/structured/automaton.h"

namespace ropeserve::structured {

struct Constraint {
  enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kChoice };
  Kind kind = Kind::kNone;
  std::string text;                  // kJsonSchema: the schema as JSON text; kRegex: the pattern
  std::vector<std::string> choices;  // kChoice: the outputs allowed, verbatim
  std::string param;                 // the request field it came from, named in errors

  bool empty() const { return kind == Kind::kNone; }
  // Equal keys compile to the same automaton.
  std::string CacheKey() const;
};

// The byte-level language of `c` (InvalidArgument naming the problem).
StatusOr<Expr> ConstraintExpr(const Constraint& c);

}  // namespace ropeserve::structured
