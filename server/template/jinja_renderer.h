// Rendering a parsed template: scopes, statements, expressions, and the
// filters, tests and methods of Jinja2 and Python strings/lists/dicts that
// chat templates use (jinja_filters.cc). Internal to server/template.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "server/template/jinja_ast.h"

namespace ropeserve::jinja::detail {

struct LoopControl {
  enum Kind { kBreak, kContinue } kind;
};
class Renderer {
 public:
  explicit Renderer(const nlohmann::ordered_json& context);

  void Render(const NodeList& body, std::string& out);

 private:
  using Scope = std::map<std::string, Value>;

  Value Lookup(const std::string& name) const;

  void InstallGlobals();

  // ------------------------------------------------------------ statements

  void Exec(const Node& n, std::string& out);

  void Assign(const std::vector<std::string>& targets, Value v, int line);

  Array Iterate(const Value& v, int line);

  void ExecFor(const Node& n, std::string& out);

  void DefineMacro(const Node& n);

  // ----------------------------------------------------------- expressions

  Args EvalArgs(const Expr& e, size_t first);

  static const Value* Kw(const Args& a, const char* name);
  static const Value* Arg(const Args& a, size_t pos, const char* name);

  Value Attr(const Value& obj, const std::string& name);

  Value Index(const Value& obj, const Value& key);

  Value Eval(const Expr& e);

  bool Contains(const Value& container, const Value& item, int line);

  bool EvalCompare(const std::string& op, const Value& a, const Value& b, int line);

  Value EvalBinary(const std::string& op, const Value& a, const Value& b, int line);

  Value EvalCall(const Expr& e);

  Value CallMethod(Value& obj, const std::string& name, Args& a, int line);
  std::optional<Value> CallStringMethod(const std::string& s, const std::string& name, Args& a, int line);
  std::optional<Value> CallListMethod(Value& obj, const std::string& name, Args& a, int line);
  std::optional<Value> CallDictMethod(Value& obj, const std::string& name, Args& a, int line);

  bool ApplyTest(const std::string& name, const Value& v, const Args& a, int line);

  Value ApplyFilter(const std::string& name, Value v, Args& a, int line);
  std::optional<Value> ApplyCollectionFilter(const std::string& name, Value& v, Args& a, int line);

  static constexpr std::uint64_t kMaxSteps = 2'000'000;  // a 1000-message chat needs ~50k
  static constexpr std::size_t kMaxOutputBytes = std::size_t{64} << 20;
  static constexpr int kMaxCallDepth = 64;
  std::vector<Scope> scopes_;
  Scope globals_;
  std::uint64_t steps_ = 0;
  int call_depth_ = 0;
};

// Names of filters and tests the renderer implements, checked at parse time
// so that a template using anything else fails when it is loaded.
const std::vector<std::string>& KnownFilters();
const std::vector<std::string>& KnownTests();

}  // namespace ropeserve::jinja::detail
