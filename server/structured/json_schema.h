// JSON Schema (the subset clients send: OpenAI strict schemas, Pydantic,
// Zod) compiled into a byte-level expression of the JSON texts it accepts.
//
// The output is compact JSON in one canonical shape: properties in the
// order the schema lists them, only declared properties, at most one space after ':' and ',',
// no other whitespace. Every such text validates against the schema; not
// every valid text is produced (which is what a generator needs).
//
// Supported: type (one or a list), properties, required,
// additionalProperties (false, true, or a schema when there are no
// properties: a map), items, prefixItems, minItems, maxItems, enum, const,
// string minLength/maxLength/pattern/format (date, time, date-time, uuid,
// email, ipv4), integer and number minimum/maximum (numbers: integer
// bounds), exclusiveMinimum/exclusiveMaximum (integers), anyOf, oneOf
// (as anyOf: branches are not checked for exclusivity), allOf with one
// schema, $ref to "#", "#/$defs/..." and "#/definitions/..." (recursion cut
// at a fixed depth), and annotations (title, description, default, ...),
// which are ignored. Anything else is InvalidArgument naming the keyword.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "server/common/status.h"
#include "server/structured/automaton.h"

namespace ropeserve::structured {

// Any JSON value with arrays and objects nested at most this deep, where a
// schema allows any value (true, {}, untyped properties).
inline constexpr int kAnyValueDepth = 3;

StatusOr<Expr> JsonSchemaExpr(const nlohmann::ordered_json& schema);

// Any JSON object (OpenAI's response_format json_object), nesting limited
// to kAnyValueDepth.
Expr AnyJsonObjectExpr();

// The JSON text of a string with the given content rules, quotes included:
// characters are unescaped code points >= U+0020 other than '"' and '\', or
// the escapes \" \\ \/ \b \f \n \r \t \uXXXX (no surrogates).
Expr JsonStringExpr(int min_chars = 0, int max_chars = Expr::kUnbounded);

}  // namespace ropeserve::structured
