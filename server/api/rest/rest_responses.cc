// OpenAI's Responses API: POST /v1/responses, GET / DELETE
// /v1/responses/{id}, POST /v1/responses/{id}/cancel. The body is
// translated into a chat request (rest_responses_request.cc) and runs the
// chat path: PrepareGeneration, the engine, one ChatOutputProcessor
// (reasoning split, tool calls). Only the shapes differ:
//   - output items: reasoning (the model's <think> text as reasoning_text
//     content; with reasoning.summary, the same text as its summary: no
//     second model call summarizes it), message (output_text), and
//     function_call (call_id, the generated arguments byte for byte);
//   - status completed, or incomplete with incomplete_details
//     {reason: max_output_tokens} when the output was cut;
//   - usage: input_tokens (prompt tokens; cached_tokens of them read from
//     the prefix cache), output_tokens (reasoning_tokens: the reasoning
//     text's tokens, counted by tokenizing it), total_tokens;
//   - streaming: OpenAI's typed events, each with its sequence_number
//     (response.created, .in_progress, .output_item.added, .content_part.added,
//     .reasoning_text.delta/.done, .output_text.delta/.done,
//     .function_call_arguments.delta/.done, .content_part.done,
//     .output_item.done, then .completed or .incomplete; .failed on a
//     failure); no [DONE].
// One ResponseBuilder makes the events and the response object, so a
// streamed response and a unary one made from the same tokens are the same.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/api/http/event_stream.h"
#include "server/api/lifecycle.h"
#include "server/api/rest/choice_assembler.h"
#include "server/api/rest/response_store.h"
#include "server/api/rest/rest_handlers.h"
#include "server/api/rest/rest_request.h"
#include "server/common/json_text.h"
#include "server/common/unix_time.h"

namespace ropeserve::api {

namespace {

using json = nlohmann::ordered_json;

// What a response is, besides its output: the request's echo and identity.
struct ResponseHead {
  std::string id;
  std::int64_t created_at = 0;
  std::string model;
  bool background = false;
  bool store = true;
  json echo;  // ResponsesBody::echo
};

class ResponseBuilder {
 public:
  ResponseBuilder(ResponseHead head, service::ChatOutputOptions options, const std::string& prompt,
                  std::int64_t prompt_tokens, bool summary, const service::GenerationService& service)
      : head_(std::move(head)),
        output_(std::move(options), prompt),
        prompt_tokens_(prompt_tokens),
        summary_(summary),
        service_(service) {}

  const std::string& id() const { return head_.id; }
  bool background() const { return head_.background; }
  const std::string& status() const { return status_; }
  bool finished() const { return status_ != "queued" && status_ != "in_progress"; }
  void SetStatus(std::string s) { status_ = std::move(s); }

  // response.created and response.in_progress.
  void Start(std::string& out) {
    Event("response.created", {{"response", Response()}}, &out);
    Event("response.in_progress", {{"response", Response()}}, &out);
  }

  // Output since the last Push; the events for it are appended to `out`
  // (nullptr: no events are wanted, none are made).
  void Push(const service::OutputDelta& d, std::string* out) {
    output_tokens_ += static_cast<std::int64_t>(d.ids.size());
    cached_ += d.cached_tokens;
    service::ChatOutputProcessor::Delta split = output_.Push(d.text, d.finished, d.finish_reason);
    if (!split.reasoning.empty()) Text(Item::kReasoning, split.reasoning, out);
    if (!split.content.empty()) Text(Item::kMessage, split.content, out);
    if (!d.finished) return;
    status_ = split.finish_reason == "length" ? "incomplete" : "completed";
    Close(out);
    for (const service::ToolCall& c : split.calls) Call(c, out);
    completed_at_ = UnixSeconds();
    reasoning_tokens_ = ReasoningTokens();
    Event(status_ == "completed" ? "response.completed" : "response.incomplete", {{"response", Response()}}, out);
  }

  // A failure: the response fails with it (response.failed).
  void Fail(const Status& s, std::string* out) {
    Close(out);
    status_ = s.code() == ErrorCode::kCancelled ? "cancelled" : "failed";
    if (status_ == "failed")
      error_ = json{{"code", s.code() == ErrorCode::kResourceExhausted ? "rate_limit_exceeded" : "server_error"},
                    {"message", s.message()}};
    Event("response.failed", {{"response", Response()}}, out);
  }

  // The response object as it stands.
  json Response() const {
    const json& e = head_.echo;
    json r = {{"id", head_.id},
              {"object", "response"},
              {"created_at", head_.created_at},
              {"status", status_},
              {"background", head_.background},
              {"completed_at", completed_at_ ? json(completed_at_) : json(nullptr)},
              {"error", error_},
              {"incomplete_details", status_ == "incomplete" ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
              {"instructions", e["instructions"]},
              {"max_output_tokens", e["max_output_tokens"]},
              {"max_tool_calls", nullptr},
              {"model", head_.model},
              {"output", items_},
              {"parallel_tool_calls", e["parallel_tool_calls"]},
              {"previous_response_id", e["previous_response_id"]},
              {"reasoning", e["reasoning"]},
              {"service_tier", "default"},
              {"store", head_.store},
              {"temperature", e["temperature"]},
              {"text", e["text"]},
              {"tool_choice", e["tool_choice"]},
              {"tools", e["tools"]},
              {"top_logprobs", 0},
              {"top_p", e["top_p"]},
              {"truncation", "disabled"},
              {"usage", nullptr},
              {"user", e["user"]},
              {"metadata", e["metadata"]}};
    if (finished() && status_ != "cancelled" && status_ != "failed") r["usage"] = Usage();
    return r;
  }

  // This response's output as one assistant chat message (what
  // previous_response_id continues); reasoning is left out, as templates
  // drop the reasoning of earlier turns.
  json AssistantMessage() const {
    const std::string text = ItemsText("message");
    json m = {{"role", "assistant"}, {"content", text.empty() ? json(nullptr) : json(text)}};
    json calls = json::array();
    for (const auto& item : items_)
      if (item["type"] == "function_call")
        calls.push_back({{"id", item["call_id"]},
                         {"type", "function"},
                         {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
    if (!calls.empty()) m["tool_calls"] = std::move(calls);
    return m;
  }

 private:
  enum class Item { kNone, kReasoning, kMessage };

  using Fields = std::initializer_list<std::pair<const char*, json>>;

  // An event {"type", head..., fields..., "sequence_number"}, made only
  // when events are wanted (its number is taken either way).
  void Event(const char* type, Fields fields, std::string* out, Fields head = {}) {
    const std::int64_t sequence = sequence_++;
    if (out == nullptr) return;
    json data = {{"type", type}};
    for (const auto& [k, v] : head) data[k] = v;
    for (const auto& [k, v] : fields) data[k] = v;
    data["sequence_number"] = sequence;
    *out += NamedEvent(type, data);
  }
  // An event about the item being written, at `index`.
  void ItemEvent(const char* type, std::int64_t index, Fields fields, std::string* out) {
    Event(type, fields, out, {{"item_id", open_id_}, {"output_index", index}});
  }

  // The text of the output items of `type` (their content parts).
  std::string ItemsText(const char* type) const {
    std::string text;
    for (const auto& item : items_)
      if (item["type"] == type)
        for (const auto& part : item["content"]) text += part["text"].get<std::string>();
    return text;
  }

  // The reasoning text's tokens (the engine does not tell them apart).
  std::int64_t ReasoningTokens() const {
    const std::string reasoning = ItemsText("reasoning");
    if (reasoning.empty()) return 0;
    auto ids = service_.Tokenize(reasoning, /*add_special_tokens=*/false);
    return ids.ok() ? std::min<std::int64_t>(static_cast<std::int64_t>(ids->size()), output_tokens_) : 0;
  }

  json Usage() const {
    return {{"input_tokens", prompt_tokens_},
            {"input_tokens_details", {{"cached_tokens", cached_}}},
            {"output_tokens", output_tokens_},
            {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens_}}},
            {"total_tokens", prompt_tokens_ + output_tokens_}};
  }

  json OpenItem() const {
    if (open_ == Item::kReasoning)
      return {{"id", open_id_}, {"type", "reasoning"}, {"summary", json::array()}, {"content", json::array()}};
    return {{"id", open_id_},
            {"type", "message"},
            {"status", "in_progress"},
            {"role", "assistant"},
            {"content", json::array()}};
  }

  json Part(const std::string& text) const {
    if (open_ == Item::kReasoning) return {{"type", "reasoning_text"}, {"text", text}};
    return {{"type", "output_text"}, {"annotations", json::array()}, {"logprobs", json::array()}, {"text", text}};
  }

  void Text(Item kind, const std::string& text, std::string* out) {
    const auto index = static_cast<std::int64_t>(items_.size());
    if (open_ != kind) {
      Close(out);
      open_ = kind;
      open_id_ = ResponseStore::NewId(kind == Item::kReasoning ? "rs_" : "msg_");
      open_text_.clear();
      Event("response.output_item.added", {{"output_index", index}, {"item", OpenItem()}}, out);
      ItemEvent("response.content_part.added", index, {{"content_index", 0}, {"part", Part("")}}, out);
    }
    open_text_ += text;
    if (kind == Item::kReasoning) {
      ItemEvent("response.reasoning_text.delta", index, {{"content_index", 0}, {"delta", text}}, out);
    } else {
      ItemEvent("response.output_text.delta", index,
                {{"content_index", 0}, {"delta", text}, {"logprobs", json::array()}}, out);
    }
  }

  // Ends the open reasoning or message item.
  void Close(std::string* out) {
    if (open_ == Item::kNone) return;
    const auto index = static_cast<std::int64_t>(items_.size());
    json item = OpenItem();
    if (open_ == Item::kReasoning) {
      ItemEvent("response.reasoning_text.done", index, {{"content_index", 0}, {"text", open_text_}}, out);
      if (summary_) {
        const json part = {{"type", "summary_text"}, {"text", open_text_}};
        ItemEvent("response.reasoning_summary_part.added", index,
                  {{"summary_index", 0}, {"part", {{"type", "summary_text"}, {"text", ""}}}}, out);
        ItemEvent("response.reasoning_summary_text.delta", index, {{"summary_index", 0}, {"delta", open_text_}}, out);
        ItemEvent("response.reasoning_summary_text.done", index, {{"summary_index", 0}, {"text", open_text_}}, out);
        ItemEvent("response.reasoning_summary_part.done", index, {{"summary_index", 0}, {"part", part}}, out);
        item["summary"].push_back(part);
      }
    } else {
      ItemEvent("response.output_text.done", index,
                {{"content_index", 0}, {"text", open_text_}, {"logprobs", json::array()}}, out);
      item["status"] = status_ == "incomplete" ? "incomplete" : "completed";
    }
    ItemEvent("response.content_part.done", index, {{"content_index", 0}, {"part", Part(open_text_)}}, out);
    item["content"].push_back(Part(open_text_));
    Event("response.output_item.done", {{"output_index", index}, {"item", item}}, out);
    items_.push_back(std::move(item));
    open_ = Item::kNone;
  }

  void Call(const service::ToolCall& c, std::string* out) {
    const auto index = static_cast<std::int64_t>(items_.size());
    open_id_ = ResponseStore::NewId("fc_");
    json item = {{"id", open_id_},  {"type", "function_call"}, {"status", "in_progress"},
                 {"arguments", ""}, {"call_id", c.id},         {"name", c.name}};
    Event("response.output_item.added", {{"output_index", index}, {"item", item}}, out);
    ItemEvent("response.function_call_arguments.delta", index, {{"delta", c.arguments}}, out);
    ItemEvent("response.function_call_arguments.done", index, {{"name", c.name}, {"arguments", c.arguments}}, out);
    item["status"] = "completed";
    item["arguments"] = c.arguments;
    Event("response.output_item.done", {{"output_index", index}, {"item", item}}, out);
    items_.push_back(std::move(item));
  }

  ResponseHead head_;
  service::ChatOutputProcessor output_;
  std::int64_t prompt_tokens_;
  bool summary_;
  const service::GenerationService& service_;
  std::string status_ = "in_progress";
  json error_ = nullptr;
  std::int64_t completed_at_ = 0;
  std::int64_t output_tokens_ = 0;
  std::int64_t cached_ = 0;
  std::int64_t reasoning_tokens_ = 0;  // counted once the output is complete
  std::int64_t sequence_ = 0;
  json items_ = json::array();
  Item open_ = Item::kNone;
  std::string open_id_;  // the id of the item being written
  std::string open_text_;
};

// What a response continues and adds to: the conversation as chat
// messages (what previous_response_id continues) and its items as
// GET /v1/responses/{id}/input_items lists them.
struct Thread {
  json conversation = json::array();
  json items = json::array();
};

// Records a response in the store: its object, the conversation it ends
// and the items it was made from.
void Record(ResponseStore& store, const std::string& owner, const ResponseBuilder& b, const Thread& thread) {
  StoredResponse s;
  s.owner = owner;
  s.response = DumpOrdered(b.Response());
  s.status = b.status();
  s.background = b.background();
  s.conversation = thread.conversation;
  if (b.finished()) s.conversation.push_back(b.AssistantMessage());
  s.items = thread.items;
  store.Put(b.id(), std::move(s));
}

Status NoSuchResponse(const std::string& id) { return NotFound("no response with id '" + id.substr(0, 100) + "'"); }

StatusOr<RestReply> ResponseText(const std::string& text) {
  RestReply reply;
  reply.body = text;
  return reply;
}

// The stored thread `body` continues (empty without previous_response_id):
// the previous response's conversation, and its items followed by its
// output. NotFound for an unknown response or another key's,
// InvalidArgument for one still running.
StatusOr<Thread> Continued(const ResponsesBody& body, const RestRequest& request) {
  if (body.previous_response_id.empty()) return Thread{};
  const std::string& id = body.previous_response_id;
  std::optional<StoredResponse> previous;
  if (request.responses != nullptr) previous = request.responses->Get(id, request.owner);
  if (!previous)
    return NotFound("previous response with id '" + id.substr(0, 100) + "' not found")
        .WithParam("previous_response_id");
  if (previous->status != "completed" && previous->status != "incomplete")
    return InvalidArgument("previous response '" + id.substr(0, 100) + "' is " + previous->status +
                           ": only a finished response can be continued")
        .WithParam("previous_response_id");
  Thread thread{std::move(previous->conversation), std::move(previous->items)};
  const json response = json::parse(previous->response, nullptr, false);
  if (response.is_object() && response["output"].is_array())
    for (const auto& item : response["output"]) thread.items.push_back(item);
  return thread;
}

// Runs a background response to its end (or until `cancelled`), recording
// it in the store as it goes.
void RunInBackground(ResponseStore& store, const std::string& owner, ResponseBuilder& builder, service::Generation& gen,
                     const Thread& thread, const std::atomic<bool>& cancelled) {
  builder.SetStatus("in_progress");
  Record(store, owner, builder, thread);
  while (!builder.finished()) {
    if (cancelled.load()) {
      gen.Cancel();
      builder.Fail(Status(ErrorCode::kCancelled, "cancelled"), nullptr);
      break;
    }
    auto d = gen.Next(std::chrono::milliseconds(100));
    if (!d.ok()) {
      builder.Fail(d.status(), nullptr);
      break;
    }
    builder.Push(*d, nullptr);
  }
  Record(store, owner, builder, thread);
}

StatusOr<RestReply> RunCreateResponse(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(ResponsesBody body, ReadResponsesBody(request.body));
  // Every field is checked before a stored conversation is looked up.
  RS_ASSIGN_OR_RETURN(ChatBody chat, ResponsesChat(body, json::array()));
  ResponseStore* store = body.store ? request.responses : nullptr;
  if (body.background && store == nullptr)
    return FailedPrecondition("background responses need the response store").WithParam("background");
  RS_ASSIGN_OR_RETURN(Thread thread, Continued(body, request));
  if (!thread.conversation.empty()) {
    RS_ASSIGN_OR_RETURN(chat, ResponsesChat(body, thread.conversation));
  }
  if (request.user != nullptr) *request.user = chat.user;
  RS_ASSIGN_OR_RETURN(service::PreparedGeneration v, service::PrepareGeneration(service, ChatInput(chat, request)));
  const std::string& prompt = v.rendered_chat;
  const std::vector<std::int64_t>& ids = v.prompts[0];
  ResponseHead head{
      ResponseStore::NewId("resp_"), UnixSeconds(), service.name(), body.background, store != nullptr, body.echo};
  // The thread this response continues, for the next one.
  for (const auto& m : body.input) thread.conversation.push_back(m);
  for (const auto& item : body.items) thread.items.push_back(item);
  auto builder = std::make_shared<ResponseBuilder>(std::move(head), ChatOutput(service, chat), prompt,
                                                   static_cast<std::int64_t>(ids.size()), body.summary, service);
  // A background run counts as an admitted request of its own: a drain
  // waits for it (up to --shutdown-timeout) before the engine stops.
  std::shared_ptr<Lifecycle::Ticket> held;
  if (body.background && request.lifecycle != nullptr) {
    RS_ASSIGN_OR_RETURN(Lifecycle::Ticket ticket, request.lifecycle->Admit());
    held = std::make_shared<Lifecycle::Ticket>(std::move(ticket));
  }
  RS_ASSIGN_OR_RETURN(auto gens, service.StartN(ids, v.generation));
  const std::string owner = request.owner;
  RestReply reply;
  if (body.background) {
    builder->SetStatus("queued");
    Record(*store, owner, *builder, thread);
    reply.body = DumpOrdered(builder->Response());
    std::shared_ptr<service::Generation> gen = std::move(gens.at(0));
    Status started = store->RunInBackground(
        builder->id(), [store, owner, builder, gen, thread, held](const std::atomic<bool>& cancelled) {
          RunInBackground(*store, owner, *builder, *gen, thread, cancelled);
        });
    if (!started.ok()) {
      gen->Cancel();
      store->Delete(builder->id(), owner);
      return started;
    }
    return reply;
  }
  if (body.stream) {
    auto stream = std::make_unique<GenerationStream>(
        std::move(gens),
        [builder, store, owner, thread](std::size_t, const service::OutputDelta& d, std::string& out) {
          builder->Push(d, &out);
          if (builder->finished() && store != nullptr) Record(*store, owner, *builder, thread);
        },
        [](std::string&) {});
    GenerationStream::Format format;
    builder->Start(format.prelude);
    format.error = [builder](const Status& s) {
      std::string out;
      builder->Fail(s, &out);
      return out;
    };
    format.done = "";
    stream->SetFormat(std::move(format));
    reply.events = std::move(stream);
    return reply;
  }
  RS_ASSIGN_OR_RETURN(auto results, service::Generation::CollectAll(gens, request.client_gone));
  builder->Push(WholeDelta(results.at(0)), nullptr);
  if (store != nullptr) Record(*store, owner, *builder, thread);
  reply.body = DumpOrdered(builder->Response());
  return reply;
}

}  // namespace

// Every error of the route, whichever layer found it (the body's reader,
// the input processor, the constraint compiler), names the field as the
// Responses API spells it.
StatusOr<RestReply> CreateResponse(service::GenerationService& service, const RestRequest& request) {
  StatusOr<RestReply> reply = RunCreateResponse(service, request);
  if (!reply.ok()) return WithResponsesParam(reply.status());
  return reply;
}

StatusOr<RestReply> RetrieveResponse(service::GenerationService&, const RestRequest& request) {
  std::optional<StoredResponse> r;
  if (request.responses != nullptr) r = request.responses->Get(request.path_id, request.owner);
  if (!r) return NoSuchResponse(request.path_id);
  return ResponseText(r->response);
}

StatusOr<RestReply> DeleteResponse(service::GenerationService&, const RestRequest& request) {
  if (request.responses == nullptr || !request.responses->Delete(request.path_id, request.owner))
    return NoSuchResponse(request.path_id);
  return ResponseText(DumpOrdered(json{{"id", request.path_id}, {"object", "response"}, {"deleted", true}}));
}

StatusOr<RestReply> CancelResponse(service::GenerationService&, const RestRequest& request) {
  if (request.responses == nullptr) return NoSuchResponse(request.path_id);
  RS_RETURN_IF_ERROR(request.responses->Cancel(request.path_id, request.owner));
  std::optional<StoredResponse> r = request.responses->Get(request.path_id, request.owner);
  if (!r) return NoSuchResponse(request.path_id);
  return ResponseText(r->response);
}

namespace {

// What GET .../input_items may be asked to include (OpenAI's
// ResponseIncludable): none changes the items here, which hold only text.
constexpr const char* kIncludable[] = {"file_search_call.results",
                                       "web_search_call.results",
                                       "web_search_call.action.sources",
                                       "message.input_image.image_url",
                                       "computer_call_output.output.image_url",
                                       "code_interpreter_call.outputs",
                                       "reasoning.encrypted_content",
                                       "message.output_text.logprobs"};

struct ItemPage {
  std::int64_t limit = 20;
  bool ascending = false;  // order: desc (newest first) by default
  std::optional<std::string> after, before;
};

StatusOr<ItemPage> ReadItemPage(const std::vector<std::pair<std::string, std::string>>& query) {
  ItemPage page;
  for (const auto& [key, value] : query) {
    if (key == "limit") {
      RS_ASSIGN_OR_RETURN(page.limit, IntegerParam("limit", value, 1, 100));
    } else if (key == "order") {
      RS_ASSIGN_OR_RETURN(page.ascending, AscendingParam(value));
    } else if (key == "after" || key == "before") {
      (key == "after" ? page.after : page.before) = value;
    } else if (key == "include" || key == "include[]") {
      bool known = false;
      for (const char* k : kIncludable) known = known || value == k;
      if (!known) return MalformedRequest("'" + value.substr(0, 100) + "' cannot be included").WithParam("include");
    } else {
      return MalformedRequest("unknown query parameter '" + key.substr(0, 100) + "'").WithParam(key.substr(0, 100));
    }
  }
  return page;
}

}  // namespace

StatusOr<RestReply> ListInputItems(service::GenerationService&, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(ItemPage page, ReadItemPage(request.query));
  std::optional<StoredResponse> r;
  if (request.responses != nullptr) r = request.responses->Get(request.path_id, request.owner);
  if (!r) return NoSuchResponse(request.path_id);
  std::vector<const json*> items;  // in the order asked for
  for (const auto& item : r->items) items.push_back(&item);
  if (!page.ascending) std::reverse(items.begin(), items.end());
  // The cursors: ids of items of this list (after: those following it;
  // before: those preceding it, in the order asked for).
  auto position = [&](const std::string& id, const char* param) -> StatusOr<std::size_t> {
    for (std::size_t i = 0; i < items.size(); ++i)
      if ((*items[i])["id"] == id) return i;
    return MalformedRequest("no item '" + id.substr(0, 100) + "' in this response's input").WithParam(param);
  };
  std::size_t begin = 0, end = items.size();
  if (page.after) {
    RS_ASSIGN_OR_RETURN(std::size_t i, position(*page.after, "after"));
    begin = i + 1;
  }
  const auto limit = static_cast<std::size_t>(page.limit);
  if (page.before) {
    RS_ASSIGN_OR_RETURN(std::size_t i, position(*page.before, "before"));
    end = std::min(end, i);
  }
  // Paging backwards (before alone): the `limit` items nearest the cursor.
  const bool backwards = page.before && !page.after;
  if (backwards && end > begin + limit) begin = end - limit;
  json data = json::array();
  for (std::size_t i = begin; i < end && data.size() < limit; ++i) data.push_back(*items[i]);
  const bool more = backwards ? begin > 0 : begin + data.size() < end;
  json list = {{"object", "list"},
               {"data", data},
               {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
               {"last_id", data.empty() ? json(nullptr) : data.back()["id"]},
               {"has_more", more}};
  return ResponseText(DumpOrdered(list));
}

}  // namespace ropeserve::api
