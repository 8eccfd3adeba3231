#include "server/template/jinja.h"

#include <algorithm>

#include "server/template/jinja_renderer.h"
#include "server/tokenizer/unicode.h"

namespace ropeserve::jinja {

namespace {

using namespace detail;

void CheckExpr(const Expr* e) {
  if (!e) return;
  auto known = [](const std::vector<std::string>& v, const std::string& n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  if (e->kind == Expr::kFilter && !known(KnownFilters(), e->name)) {
    Throw("line " + std::to_string(e->line) + ": unsupported filter '" + e->name + "'");
  }
  if (e->kind == Expr::kTest && !known(KnownTests(), e->name)) {
    Throw("line " + std::to_string(e->line) + ": unsupported test '" + e->name + "'");
  }
  for (const auto& k : e->kids) CheckExpr(k.get());
}

void CheckNodes(const NodeList& nodes) {
  for (const auto& n : nodes) {
    for (const auto& e : n->exprs) CheckExpr(e.get());
    for (const auto& p : n->params) CheckExpr(p.second.get());
    for (const auto& b : n->bodies) CheckNodes(b);
  }
}

}  // namespace

Template::~Template() = default;

StatusOr<std::shared_ptr<const Template>> Template::Parse(const std::string& source) {
  if (tok::FindInvalidUtf8(source) != std::string::npos) return InvalidArgument("template is not valid UTF-8");
  try {
    auto t = std::shared_ptr<Template>(new Template());
    t->body_ = ParseTemplate(source);
    CheckNodes(t->body_);
    return std::shared_ptr<const Template>(std::move(t));
  } catch (const JinjaError& e) {
    return InvalidArgument("chat template: " + e.message);
  }
}

StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context) const {
  try {
    Renderer r(context);
    std::string out;
    r.Render(body_, out);
    return out;
  } catch (const JinjaError& e) {
    if (e.raised_by_template) return FailedPrecondition(e.message);
    return InvalidArgument("chat template: " + e.message);
  } catch (const LoopControl&) {
    return InvalidArgument("chat template: break/continue outside a loop");
  }
}

}  // namespace ropeserve::jinja
