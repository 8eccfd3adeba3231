// POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages
// API. The body is translated into a chat request (rest_messages_request.cc)
// and runs the chat path: PrepareGeneration, the engine, one
// ChatOutputProcessor (reasoning split, tool calls). Only the shapes differ:
//   - content blocks: thinking (the model's reasoning), text, tool_use
//     (input: the generated arguments, byte for byte);
//   - stop_reason: end_turn | max_tokens | stop_sequence (with the
//     sequence) | tool_use; stop_details null (Anthropic's refusals only);
//   - usage: input_tokens (prompt tokens not read from the prefix cache),
//     cache_read_input_tokens (those read from it),
//     cache_creation_input_tokens (0), output_tokens;
//   - streaming: message_start, ping, content_block_start / _delta (text_delta,
//     thinking_delta, input_json_delta) / _stop, message_delta (stop reason and
//     the final usage), message_stop; a failure is an `error` event.
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "server/api/error_mapping.h"
#include "server/api/http/event_stream.h"
#include "server/api/rest/rest_handlers.h"
#include "server/api/rest/rest_request.h"
#include "server/common/json_text.h"
#include "server/service/json_spans.h"

namespace ropeserve::api {

namespace {

using json = nlohmann::ordered_json;

std::string StopReason(const std::string& finish_reason, const std::string& stop_string) {
  if (finish_reason == "tool_calls") return "tool_use";
  if (finish_reason == "length") return "max_tokens";
  if (!stop_string.empty()) return "stop_sequence";
  return "end_turn";
}

json StopSequence(const std::string& finish_reason, const std::string& stop_string) {
  return finish_reason == "stop" && !stop_string.empty() ? json(stop_string) : json(nullptr);
}

json Usage(std::int64_t prompt, std::int64_t cached, std::int64_t output) {
  return {{"input_tokens", prompt - cached},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached},
          {"output_tokens", output}};
}

// "toolu_" + the call id's hex digits.
std::string ToolUseId(const std::string& call_id) {
  const std::size_t us = call_id.find('_');
  return "toolu_" + (us == std::string::npos ? call_id : call_id.substr(us + 1));
}

// A tool_use block as JSON text: `input` is the generated arguments as they
// are when they are JSON (never parsed and dumped again), else the text as
// a JSON string.
std::string ToolUseBlock(const service::ToolCall& c) {
  const std::string input = service::IsJsonText(c.arguments) ? c.arguments : DumpOrdered(json(c.arguments));
  return R"({"type":"tool_use","id":)" + DumpOrdered(json(ToolUseId(c.id))) + R"(,"name":)" +
         DumpOrdered(json(c.name)) + R"(,"input":)" + input + "}";
}

// An object's JSON text with `content` (JSON text of its elements) spliced
// in after the keys of `head` and before those of `tail`.
std::string WithContent(const json& head, const std::vector<std::string>& content, const json& tail) {
  std::string out = DumpOrdered(head);
  out.pop_back();  // '}'
  out += R"(,"content":[)";
  for (std::size_t i = 0; i < content.size(); ++i) out += (i ? "," : "") + content[i];
  out += "]";
  const std::string rest = DumpOrdered(tail);
  out += rest.size() > 2 ? "," + rest.substr(1) : "}";
  return out;
}

json MessageHead(const std::string& id, const std::string& model) {
  return {{"id", id}, {"type", "message"}, {"role", "assistant"}, {"model", model}};
}

// The streamed message's state: which content block is open.
class MessageEvents {
 public:
  MessageEvents(service::ChatOutputOptions options, const std::string& prompt, std::int64_t prompt_tokens)
      : output_(std::move(options), prompt), prompt_tokens_(prompt_tokens) {}

  void Push(const service::Generation::Delta& d, std::string& out) {
    output_tokens_ += static_cast<std::int64_t>(d.ids.size());
    cached_ += d.cached_tokens;
    service::ChatOutputProcessor::Delta split = output_.Push(d.text, d.finished, d.finish_reason);
    if (!split.reasoning.empty()) Text(Block::kThinking, split.reasoning, out);
    if (!split.content.empty()) Text(Block::kText, split.content, out);
    if (!d.finished) return;
    Close(out);
    for (const service::ToolCall& c : split.calls) {
      out += NamedEvent(
          "content_block_start",
          json{{"type", "content_block_start"},
               {"index", index_},
               {"content_block",
                {{"type", "tool_use"}, {"id", ToolUseId(c.id)}, {"name", c.name}, {"input", json::object()}}}});
      out += NamedEvent("content_block_delta",
                        json{{"type", "content_block_delta"},
                             {"index", index_},
                             {"delta", {{"type", "input_json_delta"}, {"partial_json", c.arguments}}}});
      out += NamedEvent("content_block_stop", json{{"type", "content_block_stop"}, {"index", index_}});
      ++index_;
    }
    out += NamedEvent("message_delta", json{{"type", "message_delta"},
                                            {"delta",
                                             {{"stop_reason", StopReason(split.finish_reason, d.stop_string)},
                                              {"stop_sequence", StopSequence(split.finish_reason, d.stop_string)},
                                              {"stop_details", nullptr}}},
                                            {"usage", Usage(prompt_tokens_, cached_, output_tokens_)}});
    out += NamedEvent("message_stop", json{{"type", "message_stop"}});
  }

 private:
  enum class Block { kNone, kThinking, kText };

  void Text(Block kind, const std::string& text, std::string& out) {
    if (open_ != kind) {
      Close(out);
      json block = kind == Block::kThinking ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                            : json{{"type", "text"}, {"text", ""}};
      out += NamedEvent("content_block_start",
                        json{{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}});
      open_ = kind;
    }
    json delta = kind == Block::kThinking ? json{{"type", "thinking_delta"}, {"thinking", text}}
                                          : json{{"type", "text_delta"}, {"text", text}};
    out += NamedEvent("content_block_delta",
                      json{{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(delta)}});
  }
  void Close(std::string& out) {
    if (open_ == Block::kNone) return;
    out += NamedEvent("content_block_stop", json{{"type", "content_block_stop"}, {"index", index_}});
    ++index_;
    open_ = Block::kNone;
  }

  service::ChatOutputProcessor output_;
  std::int64_t prompt_tokens_;
  std::int64_t output_tokens_ = 0;
  std::int64_t cached_ = 0;
  Block open_ = Block::kNone;
  int index_ = 0;
};

StatusOr<RestReply> RunMessages(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(ChatBody chat, ReadMessagesBody(request.body));
  if (request.user != nullptr) *request.user = chat.user;
  RS_ASSIGN_OR_RETURN(service::PreparedGeneration v, service::PrepareGeneration(service, ChatInput(chat, request)));
  const std::string& prompt = v.rendered_chat;
  const std::vector<std::int64_t>& ids = v.prompts[0];
  const service::ChatOutputOptions output = ChatOutput(service, chat);
  RS_ASSIGN_OR_RETURN(auto gens, service.StartN(ids, v.generation));
  const std::string id = service.NextRequestId("msg");
  const auto prompt_tokens = static_cast<std::int64_t>(ids.size());
  RestReply reply;
  if (chat.stream) {
    json start = MessageHead(id, service.name());
    start["content"] = json::array();
    start["stop_reason"] = nullptr;
    start["stop_sequence"] = nullptr;
    start["stop_details"] = nullptr;
    start["usage"] = Usage(prompt_tokens, 0, 0);
    auto events = std::make_shared<MessageEvents>(output, prompt, prompt_tokens);
    auto stream = std::make_unique<GenerationStream>(
        std::move(gens),
        [events](std::size_t, const service::Generation::Delta& d, std::string& out) { events->Push(d, out); },
        [](std::string&) {});
    GenerationStream::Format format;
    format.prelude = NamedEvent("message_start", json{{"type", "message_start"}, {"message", std::move(start)}}) +
                     NamedEvent("ping", json{{"type", "ping"}});
    format.error = [](const Status& s) { return "event: error\ndata: " + AnthropicErrorJson(s) + "\n\n"; };
    format.done = "";
    stream->SetFormat(std::move(format));
    reply.events = std::move(stream);
    return reply;
  }
  RS_ASSIGN_OR_RETURN(auto results, service::Generation::CollectAll(gens, request.client_gone));
  const GenerateResult& r = results.at(0);
  service::ChatMessage m = service::ChatOutputProcessor::Whole(output, prompt, r.text, r.finish_reason);
  std::vector<std::string> content;
  if (m.reasoning && !m.reasoning->empty())
    content.push_back(DumpOrdered(json{{"type", "thinking"}, {"thinking", *m.reasoning}, {"signature", ""}}));
  if (m.content && !m.content->empty()) content.push_back(DumpOrdered(json{{"type", "text"}, {"text", *m.content}}));
  for (const service::ToolCall& c : m.calls) content.push_back(ToolUseBlock(c));
  const json tail = {
      {"stop_reason", StopReason(m.finish_reason, r.stop_string)},
      {"stop_sequence", StopSequence(m.finish_reason, r.stop_string)},
      {"stop_details", nullptr},  // set by Anthropic for refusals only
      {"usage", Usage(prompt_tokens, r.cached_tokens, static_cast<std::int64_t>(r.generated_ids.size()))}};
  reply.body = WithContent(MessageHead(id, service.name()), content, tail);
  return reply;
}

// {"input_tokens": n}: the prompt the messages, system prompt and tools
// render to, as /v1/messages would run it.
StatusOr<RestReply> RunCountMessageTokens(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(ChatBody chat, ReadCountTokensBody(request.body));
  RS_RETURN_IF_ERROR(service.CheckModelName(chat.model));
  RS_ASSIGN_OR_RETURN(std::string text,
                      service.ApplyChatTemplate(chat.messages, chat.add_generation_prompt, chat.extra));
  RS_ASSIGN_OR_RETURN(auto ids, service.Tokenize(text, /*add_special_tokens=*/false));
  RestReply reply;
  reply.body = Dump(nlohmann::json{{"input_tokens", ids.size()}});
  return reply;
}

// Every error of a route, whichever layer found it (the body's reader, the
// input processor, the constraint compiled at start), names the field as
// Anthropic spells it.
StatusOr<RestReply> ErrorsInAnthropicTerms(StatusOr<RestReply> reply) {
  if (!reply.ok()) return WithAnthropicParam(reply.status());
  return reply;
}

}  // namespace

StatusOr<RestReply> Messages(service::GenerationService& service, const RestRequest& request) {
  return ErrorsInAnthropicTerms(RunMessages(service, request));
}

StatusOr<RestReply> CountMessageTokens(service::GenerationService& service, const RestRequest& request) {
  return ErrorsInAnthropicTerms(RunCountMessageTokens(service, request));
}

}  // namespace ropeserve::api
