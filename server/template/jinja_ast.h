// The parsed form of a template: expressions and statements, and the
// parser (server/template/jinja_parser.cc). Internal to server/template.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/template/jinja_value.h"

namespace ropeserve::jinja::detail {

// Nesting limits: templates are data, and deep nesting must be an error,
// not a stack overflow.
constexpr int kMaxNesting = 200;

struct Expr {
  enum Kind {
    kLiteral,
    kName,
    kList,
    kTuple,
    kDict,
    kAttr,
    kIndex,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kNeg,
    kPos,
    kNot,
    kAnd,
    kOr,
    kBinary,
    kCompare,
    kCond
  };
  Kind kind;
  Value literal;
  std::string name;  // name, attribute, filter/test, operator
  std::vector<std::unique_ptr<Expr>> kids;
  std::vector<std::string> kw;  // keyword names of the trailing kids (calls/filters/tests)
  bool negated = false;
  int line = 0;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Node {
  enum Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kBlock };
  Kind kind;
  std::string text;                                        // text / set target name / macro name
  std::vector<std::string> targets;                        // for loop variables, set targets
  std::string attr;                                        // set ns.attr
  std::vector<ExprPtr> exprs;                              // conditions, iterable, value...
  std::vector<std::vector<std::unique_ptr<Node>>> bodies;  // if branches (+else), for body/else
  std::vector<std::pair<std::string, ExprPtr>> params;     // macro parameters
  bool has_else = false;
  int line = 0;
};

using NodeList = std::vector<std::unique_ptr<Node>>;

// Splits `source` into segments and parses them (trim_blocks and
// lstrip_blocks on, as transformers renders chat templates).
NodeList ParseTemplate(const std::string& source);

}  // namespace ropeserve::jinja::detail
