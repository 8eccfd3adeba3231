#include "server/api/rest/rest_request.h"

#include <cctype>
#include <limits>
#include <string_view>

#include "server/api/rest/json_fields.h"
#include "server/api/rest/rest_constraint.h"
#include "server/common/json_text.h"

namespace ropeserve::api {

namespace {

using service::Endpoint;

bool BestOfAboveOne(const ojson& v) { return !v.is_null() && !(v.is_number_integer() && v.get<std::int64_t>() == 1); }
bool NotTextModality(const ojson& v) { return !v.is_null() && v != ojson::array({"text"}); }

// Fields every generation endpoint reads (vLLM's sampling extensions
// included).
constexpr Rule kSamplingRules[] = {
    {"model", Kind::kRead},
    {"max_tokens", Kind::kRead},
    {"temperature", Kind::kRead},
    {"top_p", Kind::kRead},
    {"top_k", Kind::kRead},
    {"min_p", Kind::kRead},
    {"seed", Kind::kRead},
    {"stop", Kind::kRead},
    {"stop_token_ids", Kind::kRead},
    {"min_tokens", Kind::kRead},
    {"ignore_eos", Kind::kRead},
    {"speculative", Kind::kRead},
    {"repetition_penalty", Kind::kRead},
    {"frequency_penalty", Kind::kRead},
    {"presence_penalty", Kind::kRead},
    {"stream", Kind::kRead},
    {"stream_options", Kind::kRead},
    {"return_token_ids", Kind::kRead},
    {"user", Kind::kRead},
    {"safety_identifier", Kind::kIgnored},  // OpenAI's successor of `user`
    {"prompt_cache_key", Kind::kIgnored},   // the prefix cache needs no key
    {"priority", Kind::kRead},
    {"skip_special_tokens", Kind::kRead},
    {"include_stop_str_in_output", Kind::kRead},
    {"allowed_token_ids", Kind::kRead},
    {"bad_words", Kind::kRead},
    {"logit_bias", Kind::kRead},
    {"response_format", Kind::kRead},
    {"guided_json", Kind::kRead},
    {"guided_regex", Kind::kRead},
    {"guided_choice", Kind::kRead},
    {"guided_grammar", Kind::kUnsupported, NotNull},  // context-free grammars (EBNF, Lark): not implemented
    {"structured_outputs", Kind::kRead},
    {"use_beam_search", Kind::kUnsupported, NotFalse},
    {"best_of", Kind::kUnsupported, BestOfAboveOne},
};
constexpr Rule kCompletionRules[] = {
    {"prompt", Kind::kRead},
    {"n", Kind::kRead},
    {"logprobs", Kind::kRead},
    {"prompt_logprobs", Kind::kRead},
    {"echo", Kind::kRead},
    {"suffix", Kind::kUnsupported, NotEmpty},
    {"truncate_prompt_tokens", Kind::kRead},
};
constexpr Rule kChatRules[] = {
    {"messages", Kind::kRead},
    {"n", Kind::kRead},
    {"logprobs", Kind::kRead},
    {"top_logprobs", Kind::kRead},
    {"prompt_logprobs", Kind::kRead},
    {"truncate_prompt_tokens", Kind::kRead},
    {"max_completion_tokens", Kind::kRead},
    {"add_generation_prompt", Kind::kRead},
    {"chat_template_kwargs", Kind::kRead},
    {"documents", Kind::kRead},
    {"metadata", Kind::kIgnored},
    {"service_tier", Kind::kIgnored},
    {"parallel_tool_calls", Kind::kRead},
    {"store", Kind::kUnsupported, NotFalse},
    {"tools", Kind::kRead},
    {"tool_choice", Kind::kRead},
    {"functions", Kind::kUnsupported, NotEmpty},
    {"function_call", Kind::kUnsupported, NotNull},
    {"modalities", Kind::kUnsupported, NotTextModality},
    {"audio", Kind::kUnsupported, NotNull},
    {"prediction", Kind::kUnsupported, NotNull},
    {"reasoning_effort", Kind::kUnsupported, NotNull},
    {"verbosity", Kind::kUnsupported, NotNull},
    {"include_reasoning", Kind::kRead},
    {"web_search_options", Kind::kUnsupported, NotNull},
};
constexpr Rule kSummarizeRules[] = {
    {"text", Kind::kRead},         {"instruction", Kind::kRead},   {"strategy", Kind::kRead},
    {"style", Kind::kRead},        {"focus", Kind::kRead},         {"language", Kind::kRead},
    {"chunk_tokens", Kind::kRead}, {"chunk_overlap", Kind::kRead}, {"chunk_max_tokens", Kind::kRead},
};
constexpr Rule kTokenizeRules[] = {
    {"model", Kind::kRead},
    {"prompt", Kind::kRead},
    {"messages", Kind::kRead},
    {"add_special_tokens", Kind::kRead},
    {"add_generation_prompt", Kind::kRead},
    {"return_token_strs", Kind::kRead},
    {"chat_template_kwargs", Kind::kRead},
    {"documents", Kind::kRead},
    {"continue_final_message", Kind::kUnsupported, NotFalse},
    {"chat_template", Kind::kUnsupported, NotNull},
    {"tools", Kind::kUnsupported, NotEmpty},
    {"mm_processor_kwargs", Kind::kUnsupported, NotEmpty},
};
constexpr Rule kDetokenizeRules[] = {
    {"model", Kind::kRead},
    {"tokens", Kind::kRead},
};

// "stop": a string or a list of strings.
Status ReadStop(const ojson& body, std::vector<std::string>& out) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return Status::Ok();
  if (it->is_string()) {
    out.push_back(it->get<std::string>());
    return Status::Ok();
  }
  if (!it->is_array()) return Malformed("stop", "'stop' must be a string or a list of strings");
  // At most one more than the limit is copied: enough for the validator to
  // refuse the list, however long it is.
  for (const auto& v : *it) {
    if (!v.is_string()) return Malformed("stop", "'stop' must be a string or a list of strings");
    if (out.size() > static_cast<std::size_t>(service::kMaxStopStrings)) break;
    out.push_back(v.get<std::string>());
  }
  return Status::Ok();
}

// A list of token ids under `key` (stop_token_ids, allowed_token_ids),
// copied up to one more than `cap`: enough for the validator to refuse it.
// `given`: whether the field is there and not null (an empty list is given).
Status ReadIds(const ojson& body, const std::string& key, std::size_t cap, std::vector<std::int64_t>& out,
               bool* given = nullptr) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return Status::Ok();
  const std::string message = "'" + key + "' must be a list of token ids";
  if (!it->is_array()) return Malformed(key, message);
  if (given != nullptr) *given = true;
  for (const auto& v : *it) {
    if (!v.is_number_integer()) return Malformed(key, message);
    if (out.size() > cap) break;
    // Beyond int64: outside the vocabulary anyway.
    out.push_back(v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX ? -1 : v.get<std::int64_t>());
  }
  return Status::Ok();
}

// "bad_words": a list of strings.
Status ReadBadWords(const ojson& body, std::vector<std::string>& out) {
  auto it = body.find("bad_words");
  if (it == body.end() || it->is_null()) return Status::Ok();
  if (!it->is_array()) return Malformed("bad_words", "'bad_words' must be a list of strings");
  for (const auto& v : *it) {
    if (!v.is_string()) return Malformed("bad_words", "'bad_words' must be a list of strings");
    if (out.size() > static_cast<std::size_t>(service::kMaxBadWords)) break;  // enough to be refused
    out.push_back(v.get<std::string>());
  }
  return Status::Ok();
}

// "logit_bias": {"<token id>": bias, ...} (OpenAI: keys are token ids
// written as strings).
Status ReadLogitBias(const ojson& body, std::vector<std::pair<std::int64_t, double>>& out) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return Status::Ok();
  if (!it->is_object()) return Malformed("logit_bias", "'logit_bias' must be an object of token id -> bias");
  for (auto e = it->begin(); e != it->end(); ++e) {
    const std::string& key = e.key();
    std::int64_t id = 0;
    bool digits = !key.empty() && key.size() <= 18;
    for (char c : key) {
      if (c < '0' || c > '9')
        digits = false;
      else
        id = id * 10 + (c - '0');
    }
    if (!digits)
      return Malformed("logit_bias", "'logit_bias' keys must be token ids (got '" + key.substr(0, 50) + "')");
    if (!e.value().is_number()) return Malformed("logit_bias", "'logit_bias' values must be numbers");
    if (out.size() > static_cast<std::size_t>(service::kMaxLogitBias)) break;  // enough to be refused
    out.emplace_back(id, e.value().get<double>());
  }
  return Status::Ok();
}

// The fields every generation endpoint shares.
Status ReadGeneration(const ojson& body, Endpoint endpoint, GenerationBody& g) {
  RS_RETURN_IF_ERROR(ReadInto(body, "model", g.model));
  RS_RETURN_IF_ERROR(ReadInto(body, "user", g.user));
  RS_RETURN_IF_ERROR(ReadInto(body, "stream", g.stream));
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return Malformed("stream_options", "'stream_options' must be an object");
    for (auto it = so->begin(); it != so->end(); ++it) {
      if (it.key() != "include_usage" && it.key() != "continuous_usage_stats")
        return Malformed("stream_options", "unrecognized stream option: '" + it.key().substr(0, 100) + "'");
    }
    RS_RETURN_IF_ERROR(ReadInto(*so, "include_usage", g.include_usage));
  }
  RS_RETURN_IF_ERROR(ReadInto(body, "return_token_ids", g.return_token_ids));
  service::GenerationFields& f = g.fields;
  RS_RETURN_IF_ERROR(Read(body, "max_tokens", f.max_tokens));
  if (endpoint == Endpoint::kChat) {
    std::optional<std::int64_t> mct;
    RS_RETURN_IF_ERROR(Read(body, "max_completion_tokens", mct));
    if (mct) f.max_tokens = mct;
  }
  RS_RETURN_IF_ERROR(Read(body, "min_tokens", f.min_tokens));
  RS_RETURN_IF_ERROR(Read(body, "temperature", f.temperature));
  RS_RETURN_IF_ERROR(Read(body, "top_p", f.top_p));
  RS_RETURN_IF_ERROR(Read(body, "top_k", f.top_k));
  RS_RETURN_IF_ERROR(Read(body, "min_p", f.min_p));
  RS_RETURN_IF_ERROR(Read(body, "repetition_penalty", f.repetition_penalty));
  RS_RETURN_IF_ERROR(Read(body, "frequency_penalty", f.frequency_penalty));
  RS_RETURN_IF_ERROR(Read(body, "presence_penalty", f.presence_penalty));
  RS_RETURN_IF_ERROR(Read(body, "seed", f.seed));
  RS_RETURN_IF_ERROR(Read(body, "ignore_eos", f.ignore_eos));
  RS_RETURN_IF_ERROR(Read(body, "speculative", f.speculative));
  RS_RETURN_IF_ERROR(ReadStop(body, f.stop));
  RS_RETURN_IF_ERROR(ReadIds(body, "stop_token_ids", service::kMaxStopTokenIds, f.stop_token_ids));
  RS_RETURN_IF_ERROR(Read(body, "include_stop_str_in_output", f.include_stop_str_in_output));
  RS_RETURN_IF_ERROR(Read(body, "skip_special_tokens", f.skip_special_tokens));
  bool allowed_given = false;
  std::vector<std::int64_t> allowed;
  RS_RETURN_IF_ERROR(ReadIds(body, "allowed_token_ids", service::kMaxAllowedTokenIds, allowed, &allowed_given));
  if (allowed_given) f.allowed_token_ids = std::move(allowed);
  RS_RETURN_IF_ERROR(ReadBadWords(body, f.bad_words));
  RS_RETURN_IF_ERROR(ReadLogitBias(body, f.logit_bias));
  RS_RETURN_IF_ERROR(Read(body, "priority", f.priority));
  RS_RETURN_IF_ERROR(ReadConstraint(body, f.constraint));
  if (endpoint != Endpoint::kSummarize) {
    RS_RETURN_IF_ERROR(Read(body, "n", f.n));
    RS_RETURN_IF_ERROR(Read(body, "prompt_logprobs", f.prompt_logprobs));
    RS_RETURN_IF_ERROR(Read(body, "truncate_prompt_tokens", f.truncate_prompt_tokens));
    g.prompt_logprobs = f.prompt_logprobs.has_value();
  }
  if (endpoint == Endpoint::kChat) {
    // Chat: logprobs is a boolean and top_logprobs the count (OpenAI).
    RS_RETURN_IF_ERROR(ReadInto(body, "logprobs", g.logprobs));
    std::optional<std::int64_t> top;
    RS_RETURN_IF_ERROR(Read(body, "top_logprobs", top));
    if (top && *top > 0 && !g.logprobs)
      return InvalidArgument("'top_logprobs' needs 'logprobs': true").WithParam("top_logprobs");
    if (g.logprobs) f.top_logprobs = top.value_or(0);
  } else if (endpoint == Endpoint::kCompletions) {
    // Completions: logprobs is the count of alternatives.
    RS_RETURN_IF_ERROR(Read(body, "logprobs", f.top_logprobs));
    g.logprobs = f.top_logprobs.has_value();
    if (f.top_logprobs && *f.top_logprobs < 0)
      return InvalidArgument("'logprobs' must be between 0 and " + std::to_string(service::kMaxTopLogprobs))
          .WithParam("logprobs");
  }
  return Status::Ok();
}

StatusOr<PromptInput> ReadPrompt(const ojson& p) {
  PromptInput in;
  if (p.is_string()) {
    in.text = p.get<std::string>();
    return in;
  }
  if (!p.is_array() || p.empty())
    return Malformed("prompt", "a prompt must be a string or a non-empty list of token ids");
  for (const auto& v : p) {
    if (!v.is_number_integer()) return Malformed("prompt", "a token-id prompt must contain only integers");
    in.ids.push_back(v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)
                         ? -1  // outside the vocabulary: the validator says so
                         : v.get<std::int64_t>());
  }
  return in;
}

// A chat message's content: a string, null or absent (""), or OpenAI
// content parts ([{"type": "text", "text": ...}, ...]) joined with
// newlines (as vLLM does for string templates).
Status JoinContent(ojson& m, const std::string& where) {
  auto c = m.find("content");
  // No content (an assistant message with tool calls): "" for the
  // template, as vLLM gives string-content templates.
  if (c == m.end() || c->is_null()) {
    m["content"] = "";
    return Status::Ok();
  }
  if (c->is_string()) return Status::Ok();
  if (!c->is_array())
    return Malformed(where + ".content", "a message's content must be a string or a list of content parts");
  if (c->size() > static_cast<std::size_t>(service::kMaxContentParts))
    return InvalidArgument("a message may have at most " + std::to_string(service::kMaxContentParts) + " content parts")
        .WithParam(where + ".content");
  std::string joined;
  for (std::size_t j = 0; j < c->size(); ++j) {
    const ojson& part = (*c)[j];
    const std::string at = where + ".content[" + std::to_string(j) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return Malformed(at + ".type", "each content part must be an object with a string 'type'");
    if (part["type"] != "text")
      return Malformed(at + ".type", "content parts of type '" + part["type"].get<std::string>().substr(0, 50) +
                                         "' are not supported (only 'text')");
    if (!part.contains("text") || !part["text"].is_string())
      return Malformed(at + ".text", "a text content part needs a string 'text'");
    if (!joined.empty()) joined += "\n";
    joined += part["text"].get<std::string>();
  }
  *c = joined;
  return Status::Ok();
}

// Tool-call history, made what chat templates expect (as vLLM does): an
// assistant message's tool_calls[].function.arguments, a JSON string on
// the wire, parsed to an object (templates render it with tojson, which
// would otherwise encode the string twice); a `tool` message's
// tool_call_id must be a string.
Status ReadToolHistory(ojson& m, const std::string& where) {
  const std::string role = m["role"].get<std::string>();
  if (role == "tool") {
    auto id = m.find("tool_call_id");
    if (id != m.end() && !id->is_null() && !id->is_string())
      return Malformed(where + ".tool_call_id", "'tool_call_id' must be a string");
  }
  auto calls = m.find("tool_calls");
  if (calls == m.end() || calls->is_null()) return Status::Ok();
  if (role != "assistant") return Malformed(where + ".tool_calls", "only assistant messages have 'tool_calls'");
  if (!calls->is_array()) return Malformed(where + ".tool_calls", "'tool_calls' must be a list");
  for (std::size_t j = 0; j < calls->size(); ++j) {
    ojson& call = (*calls)[j];
    const std::string at = where + ".tool_calls[" + std::to_string(j) + "]";
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
      return Malformed(at + ".function", "each tool call needs a 'function' object");
    ojson& fn = call["function"];
    if (!fn.contains("name") || !fn["name"].is_string())
      return Malformed(at + ".function.name", "a tool call's function needs a string 'name'");
    auto args = fn.find("arguments");
    if (args == fn.end() || !args->is_string()) continue;  // absent or already an object
    // The body's depth limit holds for what the string holds too.
    RS_RETURN_IF_ERROR(CheckJsonDepth(args->get<std::string>()).WithParam(at + ".function.arguments"));
    ojson parsed = ojson::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded())
      return Malformed(at + ".function.arguments", "a tool call's 'arguments' must be a JSON text");
    *args = std::move(parsed);
  }
  return Status::Ok();
}

// What a chat request's prompt is made of: the messages (content parts
// joined, tool history parsed) and the template variables.
Status ReadMessages(ojson& body, ojson& messages, ojson& extra, bool& add_generation_prompt) {
  auto mit = body.find("messages");
  if (mit == body.end() || !mit->is_array() || mit->empty())
    return Malformed("messages", "'messages' must be a non-empty list of {\"role\", \"content\"} objects");
  if (mit->size() > static_cast<std::size_t>(service::kMaxMessages))
    return InvalidArgument("at most " + std::to_string(service::kMaxMessages) + " messages per request")
        .WithParam("messages");
  messages = std::move(*mit);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    ojson& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || m["role"].get<std::string>().empty())
      return Malformed(where + ".role", "each message must be an object with a non-empty string 'role'");
    RS_RETURN_IF_ERROR(JoinContent(m, where));
    RS_RETURN_IF_ERROR(ReadToolHistory(m, where));
  }
  if (auto d = body.find("documents"); d != body.end() && !d->is_null()) {
    if (!d->is_array()) return Malformed("documents", "'documents' must be a list");
    extra["documents"] = *d;
  }
  if (auto k = body.find("chat_template_kwargs"); k != body.end() && !k->is_null()) {
    if (!k->is_object()) return Malformed("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (auto it = k->begin(); it != k->end(); ++it) extra[it.key()] = it.value();
  }
  std::optional<bool> agp;
  RS_RETURN_IF_ERROR(Read(body, "add_generation_prompt", agp));
  add_generation_prompt = agp.value_or(true);
  return Status::Ok();
}

// The fields only the render endpoints read, taken out of `body` (the
// generation endpoint's reader then sees the body it would be sent).
// vLLM's request_id: at most 256 bytes of letters, digits and -_.:@
// (an id a log line or a header can carry).
StatusOr<RenderOptions> TakeRenderOptions(ojson& body) {
  RenderOptions out;
  RS_RETURN_IF_ERROR(ReadInto(body, "return_token_offsets", out.return_token_offsets));
  RS_RETURN_IF_ERROR(ReadInto(body, "request_id", out.request_id));
  if (out.request_id.size() > 256)
    return InvalidArgument("'request_id' is longer than 256 bytes").WithParam("request_id");
  for (char c : out.request_id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && std::string_view("-_.:@").find(c) == std::string_view::npos)
      return Malformed("request_id", "'request_id' may hold only letters, digits and - _ . : @");
  body.erase("return_token_offsets");
  body.erase("request_id");
  return out;
}

StatusOr<CompletionBody> ReadCompletionObject(ojson body) {
  RS_RETURN_IF_ERROR(CheckFields(body, kSamplingRules, kCompletionRules));
  CompletionBody out;
  RS_RETURN_IF_ERROR(ReadGeneration(body, Endpoint::kCompletions, out));
  RS_RETURN_IF_ERROR(ReadInto(body, "echo", out.echo));
  // OpenAI's echo with logprobs: the prompt's tokens get logprobs too.
  if (out.echo && out.logprobs && !out.fields.prompt_logprobs) out.fields.prompt_logprobs = out.fields.top_logprobs;
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return Malformed("prompt", "'prompt' is required");
  const ojson& p = *it;
  if (p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array())) {
    if (p.size() > static_cast<std::size_t>(service::kMaxPrompts))
      return InvalidArgument("at most " + std::to_string(service::kMaxPrompts) + " prompts per request")
          .WithParam("prompt");
    for (const auto& q : p) {
      RS_ASSIGN_OR_RETURN(PromptInput in, ReadPrompt(q));
      out.prompts.push_back(std::move(in));
    }
  } else {
    RS_ASSIGN_OR_RETURN(PromptInput in, ReadPrompt(p));
    out.prompts.push_back(std::move(in));
  }
  return out;
}

}  // namespace

StatusOr<CompletionBody> ReadCompletionBody(const std::string& text) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  return ReadCompletionObject(std::move(body));
}

StatusOr<CompletionRenderBody> ReadCompletionRenderBody(const std::string& text) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  RS_ASSIGN_OR_RETURN(RenderOptions render, TakeRenderOptions(body));
  RS_ASSIGN_OR_RETURN(CompletionBody completion, ReadCompletionObject(std::move(body)));
  return CompletionRenderBody{std::move(completion), std::move(render)};
}

StatusOr<ChatRenderBody> ReadChatRenderBody(const std::string& text) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  RS_ASSIGN_OR_RETURN(RenderOptions render, TakeRenderOptions(body));
  RS_ASSIGN_OR_RETURN(ChatBody chat, ReadChatObject(std::move(body)));
  return ChatRenderBody{std::move(chat), std::move(render)};
}

StatusOr<ChatBody> ReadChatBody(const std::string& text) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  return ReadChatObject(std::move(body));
}

StatusOr<ChatBody> ReadChatObject(ojson body) {
  RS_RETURN_IF_ERROR(CheckFields(body, kSamplingRules, kChatRules));
  ChatBody out;
  RS_RETURN_IF_ERROR(ReadGeneration(body, Endpoint::kChat, out));
  RS_RETURN_IF_ERROR(ReadMessages(body, out.messages, out.extra, out.add_generation_prompt));
  if (out.prompt_logprobs && out.stream)
    return Malformed("prompt_logprobs", "'prompt_logprobs' is returned by unary chat completions only");
  auto field = [&](const char* key) -> const ojson* {
    auto it = body.find(key);
    return it == body.end() ? nullptr : &*it;
  };
  RS_ASSIGN_OR_RETURN(out.tools,
                      service::ReadToolRequest(field("tools"), field("tool_choice"), field("parallel_tool_calls")));
  if (!out.tools.empty()) out.extra["tools"] = body["tools"];  // the chat template renders them
  if (out.tools.choice == service::ToolChoice::kRequired || out.tools.choice == service::ToolChoice::kNamed) {
    if (!out.fields.constraint.empty())
      return Malformed("tool_choice", "'tool_choice' \"required\" or a named function cannot be combined with '" +
                                          out.fields.constraint.param + "'");
    out.fields.constraint = service::ToolConstraint(out.tools);
  }
  std::optional<bool> reasoning;
  RS_RETURN_IF_ERROR(Read(body, "include_reasoning", reasoning));
  out.include_reasoning = reasoning.value_or(true);
  return out;
}

StatusOr<SummarizeBody> ReadSummarizeBody(const std::string& text) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  RS_RETURN_IF_ERROR(CheckFields(body, kSamplingRules, kSummarizeRules));
  SummarizeBody out;
  RS_RETURN_IF_ERROR(ReadGeneration(body, Endpoint::kSummarize, out));
  if (!body.contains("text") || !body["text"].is_string()) return Malformed("text", "'text' (a string) is required");
  service::SummaryFields& f = out.summary;
  f.text = body["text"].get<std::string>();
  if (f.text.empty()) return InvalidArgument("'text' must not be empty").WithParam("text");
  RS_RETURN_IF_ERROR(ReadInto(body, "instruction", f.instruction));
  for (auto [k, v] : {std::pair{"strategy", &f.strategy}, std::pair{"style", &f.style}})
    RS_RETURN_IF_ERROR(Read(body, k, *v));
  for (auto [k, v] : {std::pair{"focus", &f.focus}, std::pair{"language", &f.language}})
    RS_RETURN_IF_ERROR(ReadInto(body, k, *v));
  for (auto [k, v] : {std::pair{"chunk_tokens", &f.chunk_tokens}, std::pair{"chunk_overlap", &f.chunk_overlap},
                      std::pair{"chunk_max_tokens", &f.chunk_max_tokens}})
    RS_RETURN_IF_ERROR(Read(body, k, *v));
  return out;
}

StatusOr<TokenizeBody> ReadTokenizeBody(const std::string& text) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  RS_RETURN_IF_ERROR(CheckFields(body, kTokenizeRules));
  TokenizeBody out;
  RS_RETURN_IF_ERROR(ReadInto(body, "model", out.model));
  RS_RETURN_IF_ERROR(ReadInto(body, "return_token_strs", out.return_token_strs));
  const bool has_prompt = body.contains("prompt") && !body["prompt"].is_null();
  out.chat = body.contains("messages") && !body["messages"].is_null();
  if (has_prompt == out.chat) return Malformed("prompt", "give either 'prompt' or 'messages'");
  if (out.chat) {
    RS_RETURN_IF_ERROR(ReadMessages(body, out.messages, out.extra, out.add_generation_prompt));
    out.add_special_tokens = false;  // the template writes them
  } else {
    if (!body["prompt"].is_string()) return Malformed("prompt", "'prompt' must be a string");
    out.prompt = body["prompt"].get<std::string>();
    if (body.contains("add_generation_prompt") || body.contains("chat_template_kwargs") || body.contains("documents"))
      return Malformed("add_generation_prompt", "chat options need 'messages'");
  }
  RS_RETURN_IF_ERROR(ReadInto(body, "add_special_tokens", out.add_special_tokens));
  return out;
}

StatusOr<DetokenizeBody> ReadDetokenizeBody(const std::string& text) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  RS_RETURN_IF_ERROR(CheckFields(body, kDetokenizeRules));
  DetokenizeBody out;
  RS_RETURN_IF_ERROR(ReadInto(body, "model", out.model));
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) return Malformed("tokens", "'tokens' (a list of token ids) is required");
  for (const auto& v : *it) {
    if (!v.is_number_integer()) return Malformed("tokens", "'tokens' must contain only integers");
    out.tokens.push_back(v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)
                             ? -1  // outside the vocabulary: the handler says so
                             : v.get<std::int64_t>());
  }
  return out;
}

}  // namespace ropeserve::api
