// OpenAI's Responses API request (POST /v1/responses) translated into the
// chat endpoint's request, as vLLM's /v1/responses does: one input path
// for every API.
//
//   instructions                      -> a leading "system" message (not
//                                        carried over by previous_response_id,
//                                        as OpenAI documents)
//   input: a string                   -> one user message
//   input items:
//     message (user | assistant | system | developer; string or
//       input_text / output_text parts) -> a message (developer -> system)
//     function_call                   -> an assistant message's tool_calls
//                                        (consecutive calls share one message)
//     function_call_output            -> a "tool" message (tool_call_id = call_id)
//     reasoning                       -> dropped (templates drop earlier reasoning)
//   max_output_tokens                 -> max_tokens;  user / safety_identifier -> user
//   tools (function tools)            -> chat tools (other tool types: 400)
//   tool_choice none|auto|required|{type: function, name} -> the same choice
//   text.format text|json_object|json_schema -> response_format (the grammar engine)
//   reasoning.effort "none"           -> chat_template_kwargs.enable_thinking: false
//
// Fields are checked here with the Responses API's names; what the chat
// reader still refuses is reported with the Responses field it came from.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/api/rest/json_fields.h"
#include "server/api/rest/rest_request.h"
#include "server/common/json_text.h"
#include "server/common/random_id.h"

namespace ropeserve::api {

namespace {

bool NotDisabled(const ojson& v) { return !v.is_null() && v != "disabled"; }
bool NotAutoTier(const ojson& v) { return !v.is_null() && v != "auto" && v != "default"; }

constexpr Rule kResponsesRules[] = {
    {"model", Kind::kRead},
    {"input", Kind::kRead},
    {"instructions", Kind::kRead},
    {"max_output_tokens", Kind::kRead},
    {"temperature", Kind::kRead},
    {"top_p", Kind::kRead},
    {"tools", Kind::kRead},
    {"tool_choice", Kind::kRead},
    {"parallel_tool_calls", Kind::kRead},
    {"text", Kind::kRead},
    {"reasoning", Kind::kRead},
    {"metadata", Kind::kRead},
    {"user", Kind::kRead},
    {"safety_identifier", Kind::kRead},
    {"store", Kind::kRead},
    {"stream", Kind::kRead},
    {"stream_options", Kind::kRead},
    {"background", Kind::kRead},
    {"previous_response_id", Kind::kRead},
    {"include", Kind::kRead},
    {"seed", Kind::kRead},                       // ropeserve's extension (OpenAI has none here)
    {"prompt_cache_key", Kind::kIgnored},        // the prefix cache needs no key
    {"prompt_cache_retention", Kind::kIgnored},  // nor a retention policy
    {"service_tier", Kind::kUnsupported, NotAutoTier},
    // "auto" would drop input items to fit the context; ropeserve refuses
    // an input that does not fit instead (as "disabled" does).
    {"truncation", Kind::kUnsupported, NotDisabled},
    {"top_logprobs", Kind::kUnsupported, NotEmpty},
    {"max_tool_calls", Kind::kUnsupported, NotNull},
    {"conversation", Kind::kUnsupported, NotNull},
    {"prompt", Kind::kUnsupported, NotNull},
    {"context_management", Kind::kUnsupported, NotEmpty},
    {"background_options", Kind::kUnsupported, NotEmpty},
    {"moderation", Kind::kUnsupported, NotNull},
};

std::string At(const std::string& where, std::size_t i) { return where + "[" + std::to_string(i) + "]"; }

StatusOr<std::string> StringField(const ojson& object, const char* key, const std::string& at, const char* what) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string())
    return Malformed(at + "." + key, std::string(what) + " needs a string '" + key + "'");
  return it->get<std::string>();
}

// A message item's content: a string, or input_text / output_text parts
// (refusal parts of earlier answers count as text).
StatusOr<ojson> MessageContent(const ojson& item, const std::string& at) {
  auto c = item.find("content");
  if (c == item.end() || c->is_null()) return Malformed(at + ".content", "a message needs 'content'");
  if (c->is_string()) return *c;
  if (!c->is_array()) return Malformed(at + ".content", "a message's content must be a string or a list of parts");
  ojson parts = ojson::array();
  for (std::size_t j = 0; j < c->size(); ++j) {
    const ojson& p = (*c)[j];
    const std::string in = At(at + ".content", j);
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string())
      return Malformed(in + ".type", "each content part must be an object with a string 'type'");
    const std::string type = p["type"].get<std::string>();
    if (type == "input_text" || type == "output_text") {
      RS_RETURN_IF_ERROR(OnlyKeys(p, in, {"type", "text", "annotations", "logprobs"}));
      RS_ASSIGN_OR_RETURN(std::string text, StringField(p, "text", in, "a text part"));
      parts.push_back({{"type", "text"}, {"text", std::move(text)}});
    } else if (type == "refusal") {
      RS_RETURN_IF_ERROR(OnlyKeys(p, in, {"type", "refusal"}));
      RS_ASSIGN_OR_RETURN(std::string text, StringField(p, "refusal", in, "a refusal part"));
      parts.push_back({{"type", "text"}, {"text", std::move(text)}});
    } else {
      return Malformed(in + ".type", "content parts of type '" + type.substr(0, 50) +
                                         "' are not supported here (input_text, output_text)");
    }
  }
  return parts;
}

// A function_call_output's output: a string or input_text parts.
StatusOr<std::string> CallOutput(const ojson& item, const std::string& at) {
  auto o = item.find("output");
  if (o == item.end() || o->is_null()) return Malformed(at + ".output", "a function_call_output needs 'output'");
  if (o->is_string()) return o->get<std::string>();
  if (!o->is_array()) return Malformed(at + ".output", "'output' must be a string or a list of input_text parts");
  std::string out;
  for (std::size_t j = 0; j < o->size(); ++j) {
    const std::string in = At(at + ".output", j);
    const ojson& p = (*o)[j];
    if (!p.is_object() || p.value("type", ojson()) != "input_text")
      return Malformed(in + ".type", "only input_text parts are supported in a function_call_output");
    RS_RETURN_IF_ERROR(OnlyKeys(p, in, {"type", "text"}));
    RS_ASSIGN_OR_RETURN(std::string text, StringField(p, "text", in, "an input_text part"));
    if (!out.empty()) out += "\n";
    out += text;
  }
  return out;
}

// An input item as GET /v1/responses/{id}/input_items lists it: with an id
// (the client's, else a new one) and a status; a message's string content
// becomes one input_text (output_text for the assistant) part.
ojson ListedItem(const ojson& item, const std::string& type) {
  ojson out = {{"id", nullptr}, {"type", type}};
  for (const auto& [k, v] : item.items())
    if (k != "type") out[k] = v;
  if (!out["id"].is_string()) {
    const char* prefix = type == "message"         ? "msg_"
                         : type == "function_call" ? "fc_"
                         : type == "reasoning"     ? "rs_"
                                                   : "fco_";
    out["id"] = RandomId(prefix);
  }
  if (!out.contains("status") || out["status"].is_null()) out["status"] = "completed";
  if (type == "message" && out["content"].is_string())
    out["content"] =
        ojson::array({{{"type", out["role"] == "assistant" ? "output_text" : "input_text"}, {"text", out["content"]}}});
  return out;
}

// The input items -> chat messages; `origin` records, per message, the
// item it came from; `listed`, the items as input_items lists them.
Status ReadInput(const ojson& body, ojson& messages, std::vector<std::size_t>& origin, ojson& listed) {
  auto in = body.find("input");
  if (in == body.end() || in->is_null()) return Malformed("input", "'input' is required (a string or a list of items)");
  if (in->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *in}});
    origin.push_back(0);
    listed.push_back(ListedItem({{"role", "user"}, {"content", *in}}, "message"));
    return Status::Ok();
  }
  if (!in->is_array() || in->empty())
    return Malformed("input", "'input' must be a string or a non-empty list of items");
  if (in->size() > static_cast<std::size_t>(service::kMaxMessages))
    return InvalidArgument("at most " + std::to_string(service::kMaxMessages) + " input items per request")
        .WithParam("input");
  for (std::size_t i = 0; i < in->size(); ++i) {
    const ojson& item = (*in)[i];
    const std::string at = At("input", i);
    if (!item.is_object()) return Malformed(at, "each input item must be an object");
    std::string type = "message";
    if (auto t = item.find("type"); t != item.end() && !t->is_null()) {
      if (!t->is_string()) return Malformed(at + ".type", "an item's 'type' must be a string");
      type = t->get<std::string>();
    }
    if (type == "message") {
      RS_RETURN_IF_ERROR(OnlyKeys(item, at, {"type", "role", "content", "id", "status", "phase"}));
      auto role = item.find("role");
      if (role == item.end() || !role->is_string() ||
          (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer"))
        return Malformed(at + ".role", "a message's role must be user, assistant, system or developer");
      RS_ASSIGN_OR_RETURN(ojson content, MessageContent(item, at));
      messages.push_back({{"role", *role == "developer" ? "system" : role->get<std::string>()}, {"content", content}});
      origin.push_back(i);
    } else if (type == "function_call") {
      RS_RETURN_IF_ERROR(OnlyKeys(item, at, {"type", "call_id", "name", "arguments", "id", "status"}));
      RS_ASSIGN_OR_RETURN(std::string call_id, StringField(item, "call_id", at, "a function_call"));
      RS_ASSIGN_OR_RETURN(std::string name, StringField(item, "name", at, "a function_call"));
      RS_ASSIGN_OR_RETURN(std::string arguments, StringField(item, "arguments", at, "a function_call"));
      ojson call = {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
      // Calls made together are one assistant turn, after its text if any.
      if (!messages.empty() && messages.back()["role"] == "assistant" && origin.back() + 1 == i) {
        ojson& last = messages.back();
        if (!last.contains("tool_calls")) last["tool_calls"] = ojson::array();
        last["tool_calls"].push_back(std::move(call));
        origin.back() = i;
      } else {
        messages.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ojson::array({call})}});
        origin.push_back(i);
      }
    } else if (type == "function_call_output") {
      RS_RETURN_IF_ERROR(OnlyKeys(item, at, {"type", "call_id", "output", "id", "status"}));
      RS_ASSIGN_OR_RETURN(std::string call_id, StringField(item, "call_id", at, "a function_call_output"));
      RS_ASSIGN_OR_RETURN(std::string output, CallOutput(item, at));
      messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(output)}});
      origin.push_back(i);
    } else if (type == "reasoning") {
      RS_RETURN_IF_ERROR(OnlyKeys(item, at, {"type", "id", "summary", "content", "encrypted_content", "status"}));
    } else {
      return Malformed(at + ".type", "input items of type '" + type.substr(0, 50) +
                                         "' are not supported here (message, function_call, "
                                         "function_call_output, reasoning)");
    }
    listed.push_back(ListedItem(item, type));
  }
  if (messages.empty()) return Malformed("input", "'input' holds no message");
  return Status::Ok();
}

// tools: function tools -> chat tools. The echo lists them as OpenAI does
// (strict defaults to true).
Status ReadTools(const ojson& body, ojson& chat, ojson& echo) {
  auto t = body.find("tools");
  if (t == body.end() || t->is_null()) return Status::Ok();
  if (!t->is_array()) return Malformed("tools", "'tools' must be a list");
  ojson tools = ojson::array();
  for (std::size_t i = 0; i < t->size(); ++i) {
    const std::string at = At("tools", i);
    const ojson& tool = (*t)[i];
    if (!tool.is_object()) return Malformed(at, "each tool must be an object");
    auto type = tool.find("type");
    if (type == tool.end() || *type != "function")
      return Malformed(at + ".type", "only function tools are supported, not '" +
                                         (type == tool.end() ? std::string("(none)") : ShowJson(*type)) + "'");
    RS_RETURN_IF_ERROR(OnlyKeys(tool, at, {"type", "name", "description", "parameters", "strict"}));
    RS_ASSIGN_OR_RETURN(std::string name, StringField(tool, "name", at, "a function tool"));
    ojson fn = {{"name", name}};
    ojson shown = {
        {"type", "function"}, {"name", name}, {"description", nullptr}, {"parameters", nullptr}, {"strict", true}};
    if (auto d = tool.find("description"); d != tool.end() && !d->is_null()) {
      if (!d->is_string()) return Malformed(at + ".description", "'description' must be a string");
      fn["description"] = *d;
      shown["description"] = *d;
    }
    if (auto p = tool.find("parameters"); p != tool.end() && !p->is_null()) {
      fn["parameters"] = *p;
      shown["parameters"] = *p;
    }
    if (auto s = tool.find("strict"); s != tool.end() && !s->is_null()) {
      if (!s->is_boolean()) return Malformed(at + ".strict", "'strict' must be true or false");
      shown["strict"] = *s;
    }
    tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    echo["tools"].push_back(std::move(shown));
  }
  chat["tools"] = std::move(tools);
  return Status::Ok();
}

Status ReadToolChoice(const ojson& body, ojson& chat, ojson& echo) {
  auto c = body.find("tool_choice");
  if (c == body.end() || c->is_null()) return Status::Ok();
  if (c->is_string()) {
    if (*c != "none" && *c != "auto" && *c != "required")
      return Malformed("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", ...}");
    chat["tool_choice"] = *c;
    echo["tool_choice"] = *c;
    return Status::Ok();
  }
  if (!c->is_object() || c->value("type", ojson()) != "function")
    return Malformed("tool_choice.type",
                     "only tool_choice {\"type\": \"function\", \"name\": ...} is supported, not " + ShowJson(*c));
  RS_RETURN_IF_ERROR(OnlyKeys(*c, "tool_choice", {"type", "name"}));
  RS_ASSIGN_OR_RETURN(std::string name, StringField(*c, "name", "tool_choice", "tool_choice"));
  chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
  echo["tool_choice"] = {{"type", "function"}, {"name", name}};
  return Status::Ok();
}

// text: {"format": {"type": "text" | "json_object" | "json_schema", ...}}.
Status ReadText(const ojson& body, ojson& chat, ojson& echo) {
  auto t = body.find("text");
  if (t == body.end() || t->is_null()) return Status::Ok();
  if (!t->is_object()) return Malformed("text", "'text' must be an object");
  RS_RETURN_IF_ERROR(OnlyKeys(*t, "text", {"format", "verbosity"}));
  if (auto v = t->find("verbosity"); v != t->end() && !v->is_null()) {
    if (*v != "low" && *v != "medium" && *v != "high")
      return Malformed("text.verbosity", "'text.verbosity' must be low, medium or high");
    echo["text"]["verbosity"] = *v;  // accepted as OpenAI does; a model without such control ignores it
  }
  auto f = t->find("format");
  if (f == t->end() || f->is_null()) return Status::Ok();
  if (!f->is_object() || !f->contains("type") || !(*f)["type"].is_string())
    return Malformed("text.format", "'text.format' must be an object with a 'type' (text, json_object, json_schema)");
  const std::string type = (*f)["type"].get<std::string>();
  if (type == "text") {
    RS_RETURN_IF_ERROR(OnlyKeys(*f, "text.format", {"type"}));
  } else if (type == "json_object") {
    RS_RETURN_IF_ERROR(OnlyKeys(*f, "text.format", {"type"}));
    chat["response_format"] = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    RS_RETURN_IF_ERROR(OnlyKeys(*f, "text.format", {"type", "name", "schema", "strict", "description"}));
    RS_ASSIGN_OR_RETURN(std::string name, StringField(*f, "name", "text.format", "a json_schema format"));
    auto schema = f->find("schema");
    if (schema == f->end() || !schema->is_object())
      return Malformed("text.format.schema", "a json_schema format needs an object 'schema' (a JSON Schema)");
    if (auto s = f->find("strict"); s != f->end() && !s->is_null() && !s->is_boolean())
      return Malformed("text.format.strict", "'strict' must be true or false");
    chat["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", name}, {"schema", *schema}}}};
  } else {
    return Malformed("text.format.type", "'text.format.type' must be text, json_object or json_schema");
  }
  echo["text"]["format"] = *f;
  return Status::Ok();
}

// reasoning: {"effort": ..., "summary": ...}. Effort "none" turns a
// reasoning template's thinking off; the other efforts leave the template's
// default (the model's reasoning ends when it closes it).
Status ReadReasoning(const ojson& body, ojson& chat, ResponsesBody& out) {
  auto r = body.find("reasoning");
  if (r == body.end() || r->is_null()) return Status::Ok();
  if (!r->is_object()) return Malformed("reasoning", "'reasoning' must be an object");
  RS_RETURN_IF_ERROR(OnlyKeys(*r, "reasoning", {"effort", "summary", "generate_summary"}));
  ojson& echo = out.echo["reasoning"];
  if (auto e = r->find("effort"); e != r->end() && !e->is_null()) {
    if (*e != "none" && *e != "minimal" && *e != "low" && *e != "medium" && *e != "high" && *e != "xhigh")
      return Malformed("reasoning.effort", "'reasoning.effort' must be none, minimal, low, medium, high or xhigh");
    if (*e == "none") chat["chat_template_kwargs"] = {{"enable_thinking", false}};
    echo["effort"] = *e;
  }
  for (const char* k : {"summary", "generate_summary"}) {
    auto s = r->find(k);
    if (s == r->end() || s->is_null()) continue;
    if (*s != "auto" && *s != "concise" && *s != "detailed")
      return Malformed(std::string("reasoning.") + k, "'reasoning.summary' must be auto, concise or detailed");
    echo["summary"] = *s;
    out.summary = true;
  }
  return Status::Ok();
}

Status ReadInclude(const ojson& body) {
  auto i = body.find("include");
  if (i == body.end() || i->is_null()) return Status::Ok();
  if (!i->is_array()) return Malformed("include", "'include' must be a list");
  for (std::size_t k = 0; k < i->size(); ++k)
    // Reasoning is returned as text (no encrypted form to include).
    if ((*i)[k] != "reasoning.encrypted_content")
      return Malformed(At("include", k), "'include' value " + ShowJson((*i)[k]).substr(0, 80) +
                                             " is not supported here (only reasoning.encrypted_content)");
  return Status::Ok();
}

Status ReadMetadata(const ojson& body, ojson& echo) {
  auto m = body.find("metadata");
  if (m == body.end() || m->is_null()) return Status::Ok();
  // OpenAI's limits: 16 pairs, keys up to 64 characters, values up to 512.
  if (!m->is_object() || m->size() > 16)
    return Malformed("metadata", "'metadata' must be an object of at most 16 pairs");
  for (auto it = m->begin(); it != m->end(); ++it)
    if (it.key().size() > 64 || !it.value().is_string() || it.value().get<std::string>().size() > 512)
      return Malformed("metadata." + it.key().substr(0, 64),
                       "'metadata' values must be strings of up to 512 characters, keys up to 64");
  echo["metadata"] = *m;
  return Status::Ok();
}

}  // namespace

namespace {
// `s` about field `to`, its message naming `to` where it quoted `from`.
Status Renamed(const Status& s, const std::string& from, const std::string& to) {
  std::string m = s.message();
  for (std::size_t at = 0; (at = m.find("'" + from + "'", at)) != std::string::npos; at += to.size() + 2)
    m.replace(at, from.size() + 2, "'" + to + "'");
  return Status(s.code(), std::move(m)).WithParam(to).WithReason(s.reason());
}
}  // namespace

Status WithResponsesParam(Status s) {
  const std::string& p = s.param();
  if (p == "max_tokens") return Renamed(s, "max_tokens", "max_output_tokens");
  if (p == "response_format") return Renamed(s, "response_format", "text.format");
  if (p.rfind("tools[", 0) == 0) {
    const std::size_t f = p.find(".function");
    return f == std::string::npos ? s : s.WithParam(p.substr(0, f) + p.substr(f + 9));
  }
  return s;
}

StatusOr<ResponsesBody> ReadResponsesBody(const std::string& text) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  RS_RETURN_IF_ERROR(CheckFields(body, kResponsesRules));
  ResponsesBody out;
  ojson& chat = out.chat;
  ojson& echo = out.echo;
  echo = {{"instructions", nullptr},
          {"max_output_tokens", nullptr},
          {"metadata", ojson::object()},
          {"parallel_tool_calls", true},
          {"previous_response_id", nullptr},
          {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
          {"temperature", 1.0},
          {"text", {{"format", {{"type", "text"}}}}},
          {"tool_choice", "auto"},
          {"tools", ojson::array()},
          {"top_p", 1.0},
          {"user", nullptr}};
  if (auto m = body.find("model"); m != body.end() && !m->is_null()) {
    if (!m->is_string()) return Malformed("model", "'model' must be a string");
    chat["model"] = *m;
  }
  auto read = BodyReader(body);
  std::optional<bool> store, background, stream, parallel;
  RS_RETURN_IF_ERROR(read.Read("store", store));
  RS_RETURN_IF_ERROR(read.Read("background", background));
  RS_RETURN_IF_ERROR(read.Read("stream", stream));
  RS_RETURN_IF_ERROR(read.Read("parallel_tool_calls", parallel));
  out.store = store.value_or(true);
  out.background = background.value_or(false);
  out.stream = stream.value_or(false);
  if (out.background && !out.store)
    return Malformed("background", "a background response must be stored ('store' cannot be false)");
  if (out.background && out.stream)
    return Malformed("stream", "background responses are not streamed here: poll GET /v1/responses/{id}");
  if (out.stream) chat["stream"] = true;
  if (parallel) {
    chat["parallel_tool_calls"] = *parallel;
    echo["parallel_tool_calls"] = *parallel;
  }
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return Malformed("stream_options", "'stream_options' must be an object");
    // include_obfuscation pads events against length side channels; this
    // server sends none (the events' lengths follow the text anyway).
    RS_RETURN_IF_ERROR(OnlyKeys(*so, "stream_options", {"include_obfuscation"}));
  }
  if (auto p = body.find("previous_response_id"); p != body.end() && !p->is_null()) {
    if (!p->is_string() || p->get<std::string>().empty())
      return Malformed("previous_response_id", "'previous_response_id' must be a response id");
    out.previous_response_id = p->get<std::string>();
    echo["previous_response_id"] = *p;
  }
  if (auto i = body.find("instructions"); i != body.end() && !i->is_null()) {
    if (!i->is_string()) return Malformed("instructions", "'instructions' must be a string");
    out.instructions = i->get<std::string>();
    echo["instructions"] = *i;
  }
  RS_RETURN_IF_ERROR(ReadInput(body, out.input, out.origin, out.items));
  if (auto m = body.find("max_output_tokens"); m != body.end() && !m->is_null()) {
    chat["max_tokens"] = *m;
    echo["max_output_tokens"] = *m;
  }
  for (const char* k : {"temperature", "top_p"})
    if (auto it = body.find(k); it != body.end() && !it->is_null()) {
      chat[k] = *it;
      echo[k] = *it;
    }
  if (auto s = body.find("seed"); s != body.end()) chat["seed"] = *s;
  for (const char* k : {"user", "safety_identifier"})
    if (auto u = body.find(k); u != body.end() && !u->is_null()) {
      if (!u->is_string()) return Malformed(k, std::string("'") + k + "' must be a string");
      chat["user"] = *u;
      if (std::string(k) == "user") echo["user"] = *u;
    }
  RS_RETURN_IF_ERROR(ReadMetadata(body, echo));
  RS_RETURN_IF_ERROR(ReadTools(body, chat, echo));
  RS_RETURN_IF_ERROR(ReadToolChoice(body, chat, echo));
  RS_RETURN_IF_ERROR(ReadText(body, chat, echo));
  RS_RETURN_IF_ERROR(ReadReasoning(body, chat, out));
  RS_RETURN_IF_ERROR(ReadInclude(body));
  return out;
}

StatusOr<ChatBody> ResponsesChat(const ResponsesBody& body, const ojson& history) {
  ojson chat = body.chat;
  ojson messages = ojson::array();
  if (body.instructions) messages.push_back({{"role", "system"}, {"content", *body.instructions}});
  const std::size_t head = messages.size() + history.size();
  for (const auto& m : history) messages.push_back(m);
  for (const auto& m : body.input) messages.push_back(m);
  chat["messages"] = std::move(messages);
  auto read = ReadChatObject(std::move(chat));
  if (read.ok()) return read;
  // The chat reader's error, with the Responses field it is about.
  Status s = WithResponsesParam(read.status());
  const std::string& p = s.param();
  if (p.rfind("messages[", 0) != 0) return s;
  std::size_t k = 0, i = 9;  // after "messages["
  for (; i < p.size() && p[i] >= '0' && p[i] <= '9' && k <= head + body.origin.size(); ++i) k = k * 10 + (p[i] - '0');
  if (body.instructions && k == 0) return s.WithParam("instructions");
  if (k < head) return s.WithParam("previous_response_id");
  if (k - head < body.origin.size()) return s.WithParam("input[" + std::to_string(body.origin[k - head]) + "]");
  return s.WithParam("input");
}

}  // namespace ropeserve::api
