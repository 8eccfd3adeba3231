// A small Jinja2 interpreter for chat templates.
//
// Why hand-written: no Debian package offers Jinja for C++, and chat
// templates need exact Jinja2 + Hugging Face semantics (trim_blocks and
// lstrip_blocks on, Python-style string methods, tojson without HTML
// escaping, namespace(), raise_exception). Covers what real chat templates
// use; anything else is rejected when the template is parsed, with the line
// number, not in the middle of a request.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/common/status.h"

namespace ropeserve::jinja {

namespace detail {
struct Node;
}

class Template {
 public:
  // Parses `source`; InvalidArgument("line N: ...") on syntax errors or
  // unsupported constructs.
  static StatusOr<std::shared_ptr<const Template>> Parse(const std::string& source);
  ~Template();

  // Renders with `context` (a JSON object: its keys become variables).
  // Ordered JSON: tojson must keep the caller's key order, as Python does.
  // An error raised by the template (raise_exception) is returned as
  // FailedPrecondition with the template's message verbatim.
  StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

 private:
  Template() = default;
  std::vector<std::unique_ptr<detail::Node>> body_;
};

}  // namespace ropeserve::jinja
