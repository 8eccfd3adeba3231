#include "server/service/tool_calls.h"

#include <random>
#include <regex>
#include <string_view>

#include "server/service/json_spans.h"

namespace ropeserve::service {

using ojson = nlohmann::ordered_json;

namespace {

constexpr const char* kHermesOpen = "<tool_call>";
constexpr const char* kHermesClose = "</tool_call>";

Status Bad(const std::string& param, const std::string& message) { return MalformedRequest(message).WithParam(param); }

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string NewCallId() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* hex = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id.push_back(hex[rng() % 16]);
  return id;
}

// {"name": ..., "arguments"|"parameters": ...} as a call, from the call
// object's text, checked and taken apart without converting it
// (json_spans.h): the arguments are the model's bytes, never parsed and
// dumped again; arguments the model wrote as a JSON string give that
// string's content. A repeated key: its last value, as JSON parsers keep.
std::optional<ToolCall> CallFromText(std::string_view text) {
  const auto members = JsonObjectMembers(text);
  if (!members) return std::nullopt;
  std::optional<std::string> name;
  std::optional<std::string_view> arguments, parameters;
  for (const auto& [key, value] : *members) {
    if (key == "name") name = JsonStringValue(value);
    if (key == "arguments") arguments = value;
    if (key == "parameters") parameters = value;
  }
  if (!name) return std::nullopt;
  ToolCall c{NewCallId(), std::move(*name), "{}"};
  if (const auto raw = arguments ? arguments : parameters) {
    if (auto in_string = JsonStringValue(*raw))
      c.arguments = std::move(*in_string);
    else
      c.arguments = std::string(*raw);
  }
  return c;
}

std::optional<std::string> NonEmpty(const std::string& s) {
  std::string t = Trim(s);
  if (t.empty()) return std::nullopt;
  return t;
}

ToolOutput ParseHermes(const std::string& text) {
  ToolOutput out;
  std::string content;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t open = text.find(kHermesOpen, pos);
    if (open == std::string::npos) break;
    content += text.substr(pos, open - pos);
    const std::size_t body = open + std::string(kHermesOpen).size();
    std::size_t close = text.find(kHermesClose, body);
    const std::size_t end = close == std::string::npos ? text.size() : close + std::string(kHermesClose).size();
    if (close == std::string::npos) close = text.size();
    auto call = CallFromText(Trim(text.substr(body, close - body)));
    if (call)
      out.calls.push_back(std::move(*call));
    else
      content += text.substr(open, end - open);  // not a call: kept as text
    pos = end;
  }
  content += text.substr(std::min(pos, text.size()));
  out.content = NonEmpty(content);
  return out;
}

ToolOutput ParseLlama3(const std::string& text) {
  std::string s = Trim(text);
  const std::string tag = "<|python_tag|>";
  if (s.rfind(tag, 0) == 0) s = Trim(s.substr(tag.size()));
  ToolOutput out;
  // One call, or several separated by ';'.
  std::vector<std::string> parts;
  if (IsJsonText(s)) {
    parts.push_back(s);
  } else {
    std::size_t start = 0, semi;
    while ((semi = s.find(';', start)) != std::string::npos) {
      parts.push_back(s.substr(start, semi - start));
      start = semi + 1;
    }
    parts.push_back(s.substr(start));
  }
  for (const auto& p : parts) {
    auto call = CallFromText(Trim(p));
    if (!call) {
      out.calls.clear();
      out.content = NonEmpty(text);
      return out;
    }
    out.calls.push_back(std::move(*call));
  }
  return out;
}

}  // namespace

StatusOr<ToolRequest> ReadToolRequest(const ojson* tools, const ojson* tool_choice, const ojson* parallel) {
  ToolRequest r;
  if (tools != nullptr && !tools->is_null()) {
    if (!tools->is_array()) return Bad("tools", "'tools' must be a list");
    if (tools->size() > static_cast<std::size_t>(kMaxTools))
      return Bad("tools", "at most " + std::to_string(kMaxTools) + " tools per request");
    static const std::regex kName("^[A-Za-z0-9_.-]{1,64}$");
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const ojson& t = (*tools)[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) return Bad(at, "each tool must be an object");
      if (!t.contains("type") || t["type"] != "function")
        return Bad(at + ".type", "only tools of type 'function' are supported");
      if (!t.contains("function") || !t["function"].is_object())
        return Bad(at + ".function", "a tool needs a 'function' object");
      const ojson& fn = t["function"];
      if (!fn.contains("name") || !fn["name"].is_string() || !std::regex_match(fn["name"].get<std::string>(), kName))
        return Bad(at + ".function.name",
                   "a function's 'name' must be 1-64 characters of a-z, A-Z, 0-9, '_', '-', '.'");
      ToolFunction f{fn["name"].get<std::string>(), nullptr};
      for (const auto& existing : r.tools)
        if (existing.name == f.name) return Bad(at + ".function.name", "two tools are named '" + f.name + "'");
      if (fn.contains("parameters") && !fn["parameters"].is_null()) {
        if (!fn["parameters"].is_object())
          return Bad(at + ".function.parameters", "'parameters' must be a JSON Schema object");
        f.parameters = fn["parameters"];
      }
      r.tools.push_back(std::move(f));
    }
  }
  r.choice = r.tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (tool_choice != nullptr && !tool_choice->is_null()) {
    const ojson& c = *tool_choice;
    if (c == "none") {
      r.choice = ToolChoice::kNone;
    } else if (c == "auto") {
      r.choice = ToolChoice::kAuto;
    } else if (c == "required") {
      r.choice = ToolChoice::kRequired;
    } else if (c.is_object() && c.contains("function") && c["function"].is_object() && c["function"].contains("name") &&
               c["function"]["name"].is_string()) {
      if (c.contains("type") && c["type"] != "function")
        return Bad("tool_choice", "'tool_choice' objects must have type 'function'");
      r.choice = ToolChoice::kNamed;
      r.named = c["function"]["name"].get<std::string>();
      bool known = false;
      for (const auto& t : r.tools) known = known || t.name == r.named;
      if (!known)
        return Bad("tool_choice", "'tool_choice' names '" + r.named.substr(0, 64) + "', which is not in 'tools'");
    } else {
      return Bad("tool_choice",
                 "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
                 "{\"name\": ...}}");
    }
    if (r.choice != ToolChoice::kNone && r.tools.empty())
      return Bad("tool_choice", "'tool_choice' other than \"none\" needs 'tools'");
  }
  if (parallel != nullptr && !parallel->is_null()) {
    if (!parallel->is_boolean()) return Bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    r.parallel = parallel->get<bool>();
  }
  return r;
}

namespace {
// Local references of an embedded schema, re-rooted under `prefix`.
void Reroot(ojson& s, const std::string& prefix) {
  if (s.is_object()) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() == "$ref" && it.value().is_string()) {
        const std::string ref = it.value().get<std::string>();
        if (ref == "#")
          it.value() = "#" + prefix;
        else if (ref.rfind("#/", 0) == 0)
          it.value() = "#" + prefix + ref.substr(1);
      } else {
        Reroot(it.value(), prefix);
      }
    }
  } else if (s.is_array()) {
    for (auto& v : s) Reroot(v, prefix);
  }
}
}  // namespace

structured::Constraint ToolConstraint(const ToolRequest& r) {
  structured::Constraint c;
  const ojson any_object = {{"type", "object"}};
  if (r.choice == ToolChoice::kNamed) {
    for (const auto& t : r.tools)
      if (t.name == r.named) c.text = (t.parameters.is_null() ? any_object : t.parameters).dump();
    c.kind = structured::Constraint::Kind::kJsonSchema;
    c.param = "tool_choice";
  } else if (r.choice == ToolChoice::kRequired) {
    ojson defs = ojson::object();
    ojson options = ojson::array();
    for (std::size_t i = 0; i < r.tools.size(); ++i) {
      const ToolFunction& t = r.tools[i];
      ojson args = t.parameters.is_null() ? any_object : t.parameters;
      // Each tool's own $defs stay reachable: its schema moves under
      // #/$defs/tool<i> and its references follow.
      const std::string key = "tool" + std::to_string(i);
      Reroot(args, "/$defs/" + key);
      defs[key] = args;
      options.push_back({{"type", "object"},
                         {"properties", {{"name", {{"const", t.name}}}, {"arguments", {{"$ref", "#/$defs/" + key}}}}},
                         {"required", {"name", "arguments"}}});
    }
    ojson schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", options}}}, {"$defs", defs}};
    if (!r.parallel) schema["maxItems"] = 1;
    c.kind = structured::Constraint::Kind::kJsonSchema;
    c.text = schema.dump();
    c.param = "tools";
  }
  return c;
}

ToolFormat ToolFormatForTemplate(const std::string& chat_template) {
  if (chat_template.find(kHermesOpen) != std::string::npos) return ToolFormat::kHermes;
  if (chat_template.find("<|python_tag|>") != std::string::npos ||
      (chat_template.find("<|eot_id|>") != std::string::npos && chat_template.find("parameters") != std::string::npos))
    return ToolFormat::kLlama3Json;
  return ToolFormat::kHermes;
}

ToolOutput ParseToolOutput(const ToolRequest& r, ToolFormat format, const std::string& text) {
  ToolOutput out;
  switch (r.choice) {
    case ToolChoice::kNone:
      out.content = text;
      return out;
    case ToolChoice::kNamed:
      // The output is the arguments (constrained to their schema), as generated.
      out.calls.push_back(ToolCall{NewCallId(), r.named, text});
      return out;
    case ToolChoice::kRequired: {
      if (const auto items = JsonArrayElements(text)) {
        for (const std::string_view item : *items)
          if (auto call = CallFromText(item)) out.calls.push_back(std::move(*call));
      }
      if (out.calls.empty()) out.content = text;  // truncated: the text as it is
      return out;
    }
    case ToolChoice::kAuto:
      break;
  }
  out = format == ToolFormat::kHermes ? ParseHermes(text) : ParseLlama3(text);
  if (!r.parallel && out.calls.size() > 1) out.calls.resize(1);
  return out;
}

ToolCallStreamer::ToolCallStreamer(ToolRequest r, ToolFormat format)
    : request_(std::move(r)),
      format_(format),
      in_calls_(request_.choice == ToolChoice::kRequired || request_.choice == ToolChoice::kNamed) {}

std::string ToolCallStreamer::Push(const std::string& text) {
  all_ += text;
  if (in_calls_) return "";
  if (request_.choice == ToolChoice::kNone) {
    std::string out = all_.substr(sent_);
    sent_ = all_.size();
    return out;
  }
  if (format_ == ToolFormat::kLlama3Json) {
    // Decided once, by the output's first non-space character.
    if (sent_ == 0) {
      const std::size_t first = all_.find_first_not_of(" \t\r\n");
      if (first == std::string::npos) return "";
      if (all_[first] == '{' || all_[first] == '<') {
        in_calls_ = true;
        return "";
      }
    }
    std::string out = all_.substr(sent_);
    sent_ = all_.size();
    return out;
  }
  const std::string tag = kHermesOpen;
  const std::size_t open = all_.find(tag, sent_);
  if (open != std::string::npos) {
    std::string out = all_.substr(sent_, open - sent_);
    sent_ = open;
    in_calls_ = true;
    return out;
  }
  // Hold back a tail that may be the start of the tag.
  std::size_t hold = 0;
  for (std::size_t len = std::min(tag.size() - 1, all_.size() - sent_); len > 0; --len) {
    if (all_.compare(all_.size() - len, len, tag, 0, len) == 0) {
      hold = len;
      break;
    }
  }
  std::string out = all_.substr(sent_, all_.size() - sent_ - hold);
  sent_ = all_.size() - hold;
  return out;
}

ToolOutput ToolCallStreamer::Finish() {
  const std::string rest = all_.substr(sent_);
  if (!in_calls_ || request_.choice == ToolChoice::kNone) {
    ToolOutput out;
    if (!rest.empty()) out.content = rest;
    return out;
  }
  return ParseToolOutput(request_, format_, rest);
}

std::string ToolFinishReason(const ToolRequest& r, const ToolOutput& out, const std::string& finish_reason) {
  if (out.calls.empty() || finish_reason != "stop") return finish_reason;
  return r.choice == ToolChoice::kNamed ? "stop" : "tool_calls";
}

nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls, bool with_index) {
  nlohmann::json list = nlohmann::json::array();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    nlohmann::json c = {{"id", calls[i].id},
                        {"type", "function"},
                        {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) c["index"] = i;
    list.push_back(std::move(c));
  }
  return list;
}

}  // namespace ropeserve::service
