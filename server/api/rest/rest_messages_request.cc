// Anthropic's Messages API request (POST /v1/messages and
// /v1/messages/count_tokens) translated into the chat endpoint's request,
// as vLLM's Anthropic endpoint does: one input path for both APIs.
//
//   system (string | text blocks)     -> a "system" message
//   messages[].content text blocks    -> content parts (joined by the chat reader)
//   assistant tool_use blocks         -> tool_calls (arguments: the input object)
//   user tool_result blocks           -> "tool" messages (tool_call_id = tool_use_id)
//   assistant thinking blocks         -> dropped (Anthropic strips earlier
//                                        thinking from the context too)
//   stop_sequences                    -> stop;  metadata.user_id -> user
//   tools[].input_schema              -> function tools' parameters
//   tool_choice auto|any|tool|none    -> auto|required|named|none;
//     disable_parallel_tool_use       -> parallel_tool_calls: false
//   thinking {"type": "disabled"}     -> chat_template_kwargs.enable_thinking: false
//   thinking display "omitted"        -> include_reasoning: false
//   output_config.format json_schema  -> response_format json_schema (the grammar engine)
//   messages[] with role "system"     -> a "system" message where it stands
//
// Every field is checked here with Anthropic's names and paths; what the
// chat reader still refuses is reported with the field's Anthropic path.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/api/rest/json_fields.h"
#include "server/api/rest/rest_request.h"
#include "server/common/json_text.h"

namespace ropeserve::api {

namespace {

constexpr Rule kMessagesRules[] = {
    {"model", Kind::kRead},
    {"messages", Kind::kRead},
    {"max_tokens", Kind::kRead},
    {"system", Kind::kRead},
    {"stop_sequences", Kind::kRead},
    {"stream", Kind::kRead},
    {"temperature", Kind::kRead},
    {"top_p", Kind::kRead},
    {"top_k", Kind::kRead},
    {"tools", Kind::kRead},
    {"tool_choice", Kind::kRead},
    {"metadata", Kind::kRead},
    {"thinking", Kind::kRead},
    {"output_config", Kind::kRead},
    {"seed", Kind::kRead},  // ropeserve's extension (Anthropic has none)
    {"service_tier", Kind::kIgnored},
    {"cache_control", Kind::kIgnored},  // the prefix cache needs no breakpoints
    {"container", Kind::kUnsupported, NotNull},
    {"mcp_servers", Kind::kUnsupported, NotEmpty},
    {"context_management", Kind::kUnsupported, NotNull},
};
constexpr Rule kCountTokensRules[] = {
    {"model", Kind::kRead},         {"messages", Kind::kRead},         {"system", Kind::kRead},
    {"tools", Kind::kRead},         {"tool_choice", Kind::kRead},      {"thinking", Kind::kRead},
    {"output_config", Kind::kRead}, {"cache_control", Kind::kIgnored}, {"mcp_servers", Kind::kUnsupported, NotEmpty},
};

// origin[] of the chat message made from `system`.
constexpr std::size_t kSystem = static_cast<std::size_t>(-1);

std::string At(const std::string& where, std::size_t i) { return where + "[" + std::to_string(i) + "]"; }

// The type of a content block, or an error naming it.
StatusOr<std::string> BlockType(const ojson& block, const std::string& at) {
  if (!block.is_object() || !block.contains("type") || !block["type"].is_string())
    return Malformed(at + ".type", "each content block must be an object with a string 'type'");
  return block["type"].get<std::string>();
}

StatusOr<std::string> BlockText(const ojson& block, const std::string& at) {
  auto t = block.find("text");
  if (t == block.end() || !t->is_string()) return Malformed(at + ".text", "a text block needs a string 'text'");
  return t->get<std::string>();
}

Status Unsupported(const std::string& at, const std::string& type) {
  return Malformed(at + ".type", "content blocks of type '" + type.substr(0, 50) +
                                     "' are not supported here (text, tool_use, tool_result, thinking)");
}

// `system`: a string or a list of text blocks -> the system message's content.
Status ReadSystem(const ojson& body, ojson& messages) {
  auto s = body.find("system");
  if (s == body.end() || s->is_null()) return Status::Ok();
  if (s->is_string()) {
    messages.push_back({{"role", "system"}, {"content", *s}});
    return Status::Ok();
  }
  if (!s->is_array()) return Malformed("system", "'system' must be a string or a list of text blocks");
  ojson parts = ojson::array();
  for (std::size_t i = 0; i < s->size(); ++i) {
    const std::string at = At("system", i);
    RS_ASSIGN_OR_RETURN(std::string type, BlockType((*s)[i], at));
    if (type != "text") return Malformed(at + ".type", "'system' blocks must be text blocks");
    RS_ASSIGN_OR_RETURN(std::string text, BlockText((*s)[i], at));
    parts.push_back({{"type", "text"}, {"text", std::move(text)}});
  }
  if (!parts.empty()) messages.push_back({{"role", "system"}, {"content", std::move(parts)}});
  return Status::Ok();
}

// A tool_result's content: a string or text blocks.
StatusOr<std::string> ToolResultContent(const ojson& block, const std::string& at) {
  auto c = block.find("content");
  if (c == block.end() || c->is_null()) return std::string();
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) return Malformed(at + ".content", "a tool_result's content must be a string or text blocks");
  std::string out;
  for (std::size_t i = 0; i < c->size(); ++i) {
    const std::string in = At(at + ".content", i);
    RS_ASSIGN_OR_RETURN(std::string type, BlockType((*c)[i], in));
    if (type != "text") return Unsupported(in, type);
    RS_ASSIGN_OR_RETURN(std::string text, BlockText((*c)[i], in));
    if (!out.empty()) out += "\n";
    out += text;
  }
  return out;
}

// One Anthropic message -> one or more chat messages; `origin` records,
// per chat message, the Anthropic message it came from (error paths).
Status ReadMessage(const ojson& m, std::size_t index, ojson& out, std::vector<std::size_t>& origin) {
  const std::string where = At("messages", index);
  if (!m.is_object()) return Malformed(where, "each message must be an object with 'role' and 'content'");
  RS_RETURN_IF_ERROR(OnlyKeys(m, where, {"role", "content"}, "message"));
  auto role_it = m.find("role");
  if (role_it == m.end() || !role_it->is_string() ||
      (*role_it != "user" && *role_it != "assistant" && *role_it != "system"))
    return Malformed(where + ".role", "a message's role must be \"user\", \"assistant\" or \"system\"");
  const std::string role = role_it->get<std::string>();
  auto c = m.find("content");
  if (c == m.end() || c->is_null()) return Malformed(where + ".content", "a message needs 'content'");
  auto push = [&](ojson message) {
    out.push_back(std::move(message));
    origin.push_back(index);
  };
  if (c->is_string()) {
    push({{"role", role}, {"content", *c}});
    return Status::Ok();
  }
  if (!c->is_array()) return Malformed(where + ".content", "a message's content must be a string or content blocks");
  ojson parts = ojson::array();
  ojson calls = ojson::array();
  if (role == "system") {  // text blocks only, as the top-level 'system'
    for (std::size_t i = 0; i < c->size(); ++i) {
      const std::string at = At(where + ".content", i);
      RS_ASSIGN_OR_RETURN(std::string type, BlockType((*c)[i], at));
      if (type != "text") return Malformed(at + ".type", "system messages hold text blocks only");
      RS_ASSIGN_OR_RETURN(std::string text, BlockText((*c)[i], at));
      parts.push_back({{"type", "text"}, {"text", std::move(text)}});
    }
    push({{"role", "system"}, {"content", std::move(parts)}});
    return Status::Ok();
  }
  auto flush_user_text = [&] {
    if (!parts.empty()) push({{"role", "user"}, {"content", std::move(parts)}});
    parts = ojson::array();
  };
  for (std::size_t i = 0; i < c->size(); ++i) {
    const std::string at = At(where + ".content", i);
    const ojson& block = (*c)[i];
    RS_ASSIGN_OR_RETURN(std::string type, BlockType(block, at));
    if (type == "text") {
      RS_ASSIGN_OR_RETURN(std::string text, BlockText(block, at));
      parts.push_back({{"type", "text"}, {"text", std::move(text)}});
    } else if (type == "tool_use" && role == "assistant") {
      auto id = block.find("id");
      auto name = block.find("name");
      auto input = block.find("input");
      if (id == block.end() || !id->is_string()) return Malformed(at + ".id", "a tool_use block needs a string 'id'");
      if (name == block.end() || !name->is_string())
        return Malformed(at + ".name", "a tool_use block needs a string 'name'");
      if (input == block.end() || !input->is_object())
        return Malformed(at + ".input", "a tool_use block needs an object 'input'");
      calls.push_back({{"id", *id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", *input}}}});
    } else if (type == "tool_result" && role == "user") {
      auto id = block.find("tool_use_id");
      if (id == block.end() || !id->is_string())
        return Malformed(at + ".tool_use_id", "a tool_result block needs a string 'tool_use_id'");
      if (auto e = block.find("is_error"); e != block.end() && !e->is_null() && !e->is_boolean())
        return Malformed(at + ".is_error", "'is_error' must be true or false");
      RS_ASSIGN_OR_RETURN(std::string content, ToolResultContent(block, at));
      flush_user_text();  // the tool results and the text keep their order
      push({{"role", "tool"}, {"tool_call_id", *id}, {"content", std::move(content)}});
    } else if ((type == "thinking" || type == "redacted_thinking") && role == "assistant") {
      continue;
    } else if (type == "tool_use" || type == "tool_result" || type == "thinking" || type == "redacted_thinking") {
      return Malformed(at + ".type", "'" + type + "' blocks belong in " +
                                         (type == "tool_result" ? "user" : "assistant") + " messages");
    } else {
      return Unsupported(at, type);
    }
  }
  if (role == "user") {
    flush_user_text();
  } else {
    ojson a = {{"role", "assistant"}, {"content", parts.empty() ? ojson(nullptr) : ojson(std::move(parts))}};
    if (!calls.empty()) a["tool_calls"] = std::move(calls);
    push(std::move(a));
  }
  return Status::Ok();
}

// tools -> function tools.
Status ReadTools(const ojson& body, ojson& chat) {
  auto t = body.find("tools");
  if (t == body.end() || t->is_null()) return Status::Ok();
  if (!t->is_array()) return Malformed("tools", "'tools' must be a list");
  ojson tools = ojson::array();
  for (std::size_t i = 0; i < t->size(); ++i) {
    const std::string at = At("tools", i);
    const ojson& tool = (*t)[i];
    if (!tool.is_object()) return Malformed(at, "each tool must be an object");
    for (auto it = tool.begin(); it != tool.end(); ++it) {
      const std::string& k = it.key();
      // strict: every tool call is constrained to its schema here anyway;
      // eager_input_streaming: the input is sent in one delta when generated.
      if (k != "name" && k != "description" && k != "input_schema" && k != "type" && k != "cache_control" &&
          k != "strict" && k != "eager_input_streaming")
        return Malformed(at + "." + k.substr(0, 100), "unsupported tool field: '" + k.substr(0, 100) + "'");
    }
    if (auto type = tool.find("type"); type != tool.end() && !type->is_null() && *type != "custom")
      return Malformed(at + ".type", "only client tools (\"custom\", with an input_schema) are supported, not '" +
                                         ShowJson(*type) + "'");
    auto name = tool.find("name");
    if (name == tool.end() || !name->is_string()) return Malformed(at + ".name", "a tool needs a string 'name'");
    auto schema = tool.find("input_schema");
    if (schema == tool.end() || !schema->is_object())
      return Malformed(at + ".input_schema", "a tool needs an object 'input_schema' (a JSON Schema)");
    ojson fn = {{"name", *name}};
    if (auto d = tool.find("description"); d != tool.end() && !d->is_null()) {
      if (!d->is_string()) return Malformed(at + ".description", "'description' must be a string");
      fn["description"] = *d;
    }
    fn["parameters"] = *schema;
    tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  chat["tools"] = std::move(tools);
  return Status::Ok();
}

Status ReadToolChoice(const ojson& body, ojson& chat) {
  auto c = body.find("tool_choice");
  if (c == body.end() || c->is_null()) return Status::Ok();
  if (!c->is_object() || !c->contains("type") || !(*c)["type"].is_string())
    return Malformed("tool_choice", "'tool_choice' must be an object with a 'type' (auto, any, tool, none)");
  const std::string type = (*c)["type"].get<std::string>();
  RS_RETURN_IF_ERROR(OnlyKeys(*c, "tool_choice", {"type", "name", "disable_parallel_tool_use"}, "tool_choice"));
  if (type == "auto") {
    chat["tool_choice"] = "auto";
  } else if (type == "any") {
    chat["tool_choice"] = "required";
  } else if (type == "none") {
    chat["tool_choice"] = "none";
  } else if (type == "tool") {
    auto name = c->find("name");
    if (name == c->end() || !name->is_string())
      return Malformed("tool_choice.name", "tool_choice \"tool\" needs the tool's 'name'");
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    return Malformed("tool_choice.type", "'tool_choice.type' must be auto, any, tool or none");
  }
  if (auto d = c->find("disable_parallel_tool_use"); d != c->end() && !d->is_null()) {
    if (!d->is_boolean()) return Malformed("tool_choice.disable_parallel_tool_use", "must be true or false");
    if (d->get<bool>()) chat["parallel_tool_calls"] = false;
  }
  return Status::Ok();
}

// thinking: {"type": "enabled", "budget_tokens": n}, {"type": "adaptive"},
// {"type": "between_tools"} or {"type": "disabled"}; "display": "omitted"
// drops the thinking text. budget_tokens is checked as Anthropic does
// (>= 1024) and not enforced: the model's reasoning ends when it closes it,
// within max_tokens. Without 'thinking' the chat template's default holds.
Status ReadThinking(const ojson& body, ojson& chat) {
  auto t = body.find("thinking");
  if (t == body.end() || t->is_null()) return Status::Ok();
  if (!t->is_object() || !t->contains("type") || !(*t)["type"].is_string())
    return Malformed("thinking",
                     "'thinking' must be an object with a 'type' (enabled, adaptive, between_tools, "
                     "disabled)");
  const std::string type = (*t)["type"].get<std::string>();
  for (auto it = t->begin(); it != t->end(); ++it) {
    const std::string& k = it.key();
    const bool known = k == "type" || (k == "budget_tokens" && type == "enabled") ||
                       (k == "display" && (type == "enabled" || type == "adaptive"));
    if (!known)
      return Malformed("thinking." + k.substr(0, 100),
                       "unrecognized field for thinking type '" + type.substr(0, 50) + "': '" + k.substr(0, 100) + "'");
  }
  if (type == "disabled") {
    chat["chat_template_kwargs"] = {{"enable_thinking", false}};
    chat["include_reasoning"] = false;
    return Status::Ok();
  }
  if (type != "enabled" && type != "adaptive" && type != "between_tools")
    return Malformed("thinking.type", "'thinking.type' must be enabled, adaptive, between_tools or disabled");
  if (type == "enabled") {
    std::optional<std::int64_t> budget;
    RS_RETURN_IF_ERROR(BodyReader(*t, "thinking").Read("budget_tokens", budget));
    if (!budget || *budget < 1024)
      return Malformed("thinking.budget_tokens", "'thinking.budget_tokens' must be an integer >= 1024");
  }
  if (auto d = t->find("display"); d != t->end() && !d->is_null()) {
    if (*d != "summarized" && *d != "omitted")
      return Malformed("thinking.display", "'thinking.display' must be \"summarized\" or \"omitted\"");
    if (*d == "omitted") chat["include_reasoning"] = false;
  }
  return Status::Ok();
}

// output_config: {"format": {"type": "json_schema", "schema": {...}}} is the
// chat's response_format json_schema; "effort" has no meaning for a model
// without a reasoning budget and is accepted as Anthropic accepts it for
// models without effort control.
Status ReadOutputConfig(const ojson& body, ojson& chat) {
  auto o = body.find("output_config");
  if (o == body.end() || o->is_null()) return Status::Ok();
  if (!o->is_object()) return Malformed("output_config", "'output_config' must be an object");
  RS_RETURN_IF_ERROR(OnlyKeys(*o, "output_config", {"format", "effort"}, "output_config"));
  if (auto e = o->find("effort"); e != o->end() && !e->is_null()) {
    if (!e->is_string() || (*e != "low" && *e != "medium" && *e != "high" && *e != "xhigh" && *e != "max"))
      return Malformed("output_config.effort", "'output_config.effort' must be low, medium, high, xhigh or max");
  }
  auto f = o->find("format");
  if (f == o->end() || f->is_null()) return Status::Ok();
  if (!f->is_object() || f->value("type", ojson()) != "json_schema")
    return Malformed("output_config.format.type",
                     "'output_config.format' must be {\"type\": \"json_schema\", "
                     "\"schema\": {...}}");
  RS_RETURN_IF_ERROR(OnlyKeys(*f, "output_config.format", {"type", "schema"}, "output_config.format"));
  auto schema = f->find("schema");
  if (schema == f->end() || !schema->is_object())
    return Malformed("output_config.format.schema", "'output_config.format.schema' must be a JSON Schema object");
  chat["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", *schema}}}};
  return Status::Ok();
}

// The chat reader's error, with the Anthropic field it is about.
Status InAnthropicTerms(Status s, const std::vector<std::size_t>& origin) {
  s = WithAnthropicParam(std::move(s));
  const std::string& p = s.param();
  if (p.rfind("messages[", 0) != 0) return s;
  std::size_t k = 0, i = 9;  // after "messages["
  for (; i < p.size() && p[i] >= '0' && p[i] <= '9' && k < origin.size(); ++i) k = k * 10 + (p[i] - '0');
  if (i >= p.size() || p[i] != ']' || k >= origin.size()) return s.WithParam("messages");
  if (origin[k] == kSystem) return s.WithParam("system");
  return s.WithParam("messages[" + std::to_string(origin[k]) + "]" + p.substr(i + 1));
}

StatusOr<ChatBody> Translate(ojson body, bool count_only) {
  if (count_only) {
    RS_RETURN_IF_ERROR(CheckFields(body, kCountTokensRules));
  } else {
    RS_RETURN_IF_ERROR(CheckFields(body, kMessagesRules));
  }
  auto model = body.find("model");
  if (model == body.end() || !model->is_string() || model->get<std::string>().empty())
    return Malformed("model", "'model' is required (a string)");
  ojson chat = {{"model", *model}};
  if (!count_only) {
    auto max_tokens = body.find("max_tokens");
    if (max_tokens == body.end() || max_tokens->is_null()) return Malformed("max_tokens", "'max_tokens' is required");
    for (const char* k : {"max_tokens", "temperature", "top_p", "top_k", "stream", "seed"})
      if (auto it = body.find(k); it != body.end()) chat[k] = *it;
    if (auto it = body.find("stop_sequences"); it != body.end() && !it->is_null()) {
      if (!it->is_array()) return Malformed("stop_sequences", "'stop_sequences' must be a list of strings");
      chat["stop"] = *it;
    }
    if (auto it = body.find("metadata"); it != body.end() && !it->is_null()) {
      if (!it->is_object()) return Malformed("metadata", "'metadata' must be an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m.key() != "user_id")
          return Malformed("metadata." + m.key().substr(0, 100),
                           "unrecognized metadata field: '" + m.key().substr(0, 100) + "' (only user_id)");
      if (auto u = it->find("user_id"); u != it->end() && !u->is_null()) {
        if (!u->is_string()) return Malformed("metadata.user_id", "'metadata.user_id' must be a string");
        chat["user"] = *u;
      }
    }
  }
  ojson messages = ojson::array();
  std::vector<std::size_t> origin;
  RS_RETURN_IF_ERROR(ReadSystem(body, messages));
  if (!messages.empty()) origin.push_back(kSystem);
  auto m = body.find("messages");
  if (m == body.end() || !m->is_array() || m->empty())
    return Malformed("messages", "'messages' must be a non-empty list of {\"role\", \"content\"} objects");
  if (m->size() > static_cast<std::size_t>(service::kMaxMessages))
    return InvalidArgument("at most " + std::to_string(service::kMaxMessages) + " messages per request")
        .WithParam("messages");
  for (std::size_t i = 0; i < m->size(); ++i) RS_RETURN_IF_ERROR(ReadMessage((*m)[i], i, messages, origin));
  chat["messages"] = std::move(messages);
  RS_RETURN_IF_ERROR(ReadTools(body, chat));
  RS_RETURN_IF_ERROR(ReadToolChoice(body, chat));
  RS_RETURN_IF_ERROR(ReadThinking(body, chat));
  RS_RETURN_IF_ERROR(ReadOutputConfig(body, chat));
  auto read = ReadChatObject(std::move(chat));
  if (!read.ok()) return InAnthropicTerms(read.status(), origin);
  return read;
}

}  // namespace

Status WithAnthropicParam(Status s) {
  if (s.param() == "stop") return s.WithParam("stop_sequences");
  if (s.param() == "user") return s.WithParam("metadata.user_id");
  if (s.param() == "response_format") return s.WithParam("output_config.format.schema");
  return s;
}

StatusOr<ChatBody> ReadMessagesBody(const std::string& text) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  return Translate(std::move(body), /*count_only=*/false);
}

StatusOr<ChatBody> ReadCountTokensBody(const std::string& text) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  return Translate(std::move(body), /*count_only=*/true);
}

}  // namespace ropeserve::api
