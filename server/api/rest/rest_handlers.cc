#include "server/api/rest/rest_handlers.h"

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <functional>
#include <mutex>

#include "server/api/error_mapping.h"
#include "server/api/http/event_stream.h"
#include "server/api/rest/choice_assembler.h"
#include "server/api/rest/rest_request.h"
#include "server/common/json_text.h"
#include "server/common/unix_time.h"
#include "server/service/chat_output.h"
#include "server/service/input_processor.h"

namespace ropeserve::api {

using json = nlohmann::json;

namespace {

using service::Endpoint;

// Starts n choices for each prompt; choice index = prompt * n + k.
StatusOr<std::vector<std::unique_ptr<service::Generation>>> StartAll(
    service::GenerationService& service, const std::vector<std::vector<std::int64_t>>& prompts,
    const service::ValidatedGeneration& validated) {
  std::vector<std::unique_ptr<service::Generation>> all;
  for (const auto& ids : prompts) {
    RS_ASSIGN_OR_RETURN(auto gens, service.StartN(ids, validated));
    for (auto& g : gens) all.push_back(std::move(g));
  }
  return all;
}

// Token counts a streamed request accumulates for its usage event.
struct StreamTotals {
  std::int64_t prompt = 0;
  std::int64_t completion = 0;
  std::int64_t cached = 0;
};

// The stream's last chunk before [DONE] when stream_options.include_usage:
// empty choices and the usage (OpenAI).
template <typename Chunk>
GenerationStream::OnEnd UsageChunk(bool include_usage, Chunk chunk, std::shared_ptr<StreamTotals> totals) {
  return [include_usage, chunk, totals](std::string& out) {
    if (!include_usage) return;
    json last = chunk(json::array());
    last["usage"] = Usage(totals->prompt, totals->completion, totals->cached);
    out += Event(last);
  };
}

std::int64_t PromptTokens(const std::vector<std::vector<std::int64_t>>& prompts) {
  std::int64_t n = 0;
  for (const auto& p : prompts) n += static_cast<std::int64_t>(p.size());
  return n;
}

}  // namespace

service::GenerationRequest CompletionInput(const CompletionBody& body, const RestRequest& request) {
  service::GenerationRequest input;
  input.model = body.model;
  input.prompts = body.prompts;
  input.fields = body.fields;
  input.fields.server_priority = request.priority;
  input.endpoint = Endpoint::kCompletions;
  input.timeout_seconds = request.timeout_seconds;
  input.trace = request.trace;
  return input;
}

StatusOr<service::PreparedGeneration> PrepareCompletion(service::GenerationService& service, const CompletionBody& body,
                                                        const RestRequest& request) {
  auto v = service::PrepareGeneration(service, CompletionInput(body, request));
  // Completions call the alternatives count `logprobs`.
  if (!v.ok()) return v.status().param() == "top_logprobs" ? v.status().WithParam("logprobs") : v.status();
  return v;
}

StatusOr<RestReply> Completions(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(CompletionBody body, ReadCompletionBody(request.body));
  if (request.user != nullptr) *request.user = body.user;
  RS_ASSIGN_OR_RETURN(const service::PreparedGeneration prepared, PrepareCompletion(service, body, request));
  const std::vector<std::vector<std::int64_t>>& prompts = prepared.prompts;
  const bool logprobs = body.logprobs, return_token_ids = body.return_token_ids, echo = body.echo;
  const bool vllm_prompt_logprobs = body.prompt_logprobs;
  // Each prompt, shared by its choices. Echo: its text as given
  // (token-id prompts, and prompts cut by truncate_prompt_tokens: the
  // tokens kept, decoded, special tokens kept).
  std::vector<std::shared_ptr<CompletionPrompt>> shared(prompts.size());
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    shared[p] = std::make_shared<CompletionPrompt>();
    shared[p]->ids = prompts[p];
    if (!echo) continue;
    if (body.prompts[p].text && !body.fields.truncate_prompt_tokens) {
      shared[p]->echo_text = *body.prompts[p].text;
    } else if (service.tokenizer() != nullptr) {
      RS_ASSIGN_OR_RETURN(shared[p]->echo_text, service.Detokenize(prompts[p], /*skip_special_tokens=*/false));
    }
  }
  RS_ASSIGN_OR_RETURN(auto gens, StartAll(service, prompts, prepared.generation));
  const std::string id = service.NextRequestId("cmpl");
  const std::int64_t created = UnixSeconds();
  const std::int64_t prompt_tokens = PromptTokens(prompts);
  const std::size_t n = static_cast<std::size_t>(prepared.generation.n());
  // One assembler per choice (choice k is prompt k / n's), the same for
  // streaming and unary; the prompt's first choice computes its logprobs.
  const CompletionChoiceOptions options{logprobs, return_token_ids, echo, vllm_prompt_logprobs};
  auto choices = std::make_shared<std::vector<CompletionChoice>>();
  for (std::size_t k = 0; k < gens.size(); ++k) choices->emplace_back(service, k, options, shared[k / n], k % n == 0);
  RestReply reply;
  if (body.stream) {
    auto totals = std::make_shared<StreamTotals>();
    totals->prompt = prompt_tokens;
    auto chunk = [&service, id, created](json choices) {
      return json{{"id", id},
                  {"object", "text_completion"},
                  {"created", created},
                  {"model", service.name()},
                  {"choices", std::move(choices)}};
    };
    auto on_delta = [chunk, totals, choices, n](std::size_t i, const service::Generation::Delta& d, std::string& out) {
      totals->completion += static_cast<std::int64_t>(d.ids.size());
      if (i % n == 0) totals->cached += d.cached_tokens;
      std::optional<json> choice = (*choices)[i].Push(d);
      if (!choice) return;
      out += Event(chunk(json::array({std::move(*choice)})));
    };
    reply.events =
        std::make_unique<GenerationStream>(std::move(gens), on_delta, UsageChunk(body.include_usage, chunk, totals));
    return reply;
  }
  RS_ASSIGN_OR_RETURN(auto results, service::Generation::CollectAll(gens, request.client_gone));
  json out_choices = json::array();
  std::int64_t completion_tokens = 0, cached = 0;
  for (std::size_t k = 0; k < results.size(); ++k) {
    const GenerateResult& r = results[k];
    completion_tokens += static_cast<std::int64_t>(r.generated_ids.size());
    if (k % n == 0) cached += r.cached_tokens;
    // The whole result as one delta: the prompt's first choice (StartN)
    // brings its logprobs before the others read them.
    out_choices.push_back(*(*choices)[k].Push(WholeDelta(r)));
  }
  reply.body = Dump({{"id", id},
                     {"object", "text_completion"},
                     {"created", created},
                     {"model", service.name()},
                     {"choices", std::move(out_choices)},
                     {"usage", Usage(prompt_tokens, completion_tokens, cached)}});
  return reply;
}

// POST /v1/chat/completions: the messages are rendered with the model's
// chat template (add_generation_prompt=true), tokenized without adding
// special tokens (the template writes them), and generated like a
// completion.
service::GenerationRequest ChatInput(const ChatBody& body, const RestRequest& request) {
  service::GenerationRequest input;
  input.model = body.model;
  input.chat = service::ChatPrompt{body.messages, body.extra, body.add_generation_prompt};
  input.fields = body.fields;
  input.fields.server_priority = request.priority;
  input.endpoint = Endpoint::kChat;
  input.timeout_seconds = request.timeout_seconds;
  input.trace = request.trace;
  return input;
}

service::ChatOutputOptions ChatOutput(const service::GenerationService& service, const ChatBody& body) {
  service::ChatOutputOptions output;
  output.reasons = service.reasons();
  output.include_reasoning = body.include_reasoning;
  output.tools = body.tools;
  output.tool_format = service.tool_format();
  return output;
}

StatusOr<RestReply> ChatCompletions(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(ChatBody body, ReadChatBody(request.body));
  if (request.user != nullptr) *request.user = body.user;
  RS_ASSIGN_OR_RETURN(service::PreparedGeneration v, service::PrepareGeneration(service, ChatInput(body, request)));
  const std::string& prompt = v.rendered_chat;
  const std::vector<std::int64_t>& ids = v.prompts[0];
  const bool logprobs = body.logprobs, return_token_ids = body.return_token_ids;
  // Models that reason: <think> text goes to reasoning_content (or nowhere
  // with include_reasoning: false); tool calls are parsed out; the rest is
  // content. One processor per choice, the same for streaming and unary.
  const service::ChatOutputOptions output = ChatOutput(service, body);
  RS_ASSIGN_OR_RETURN(auto gens, service.StartN(ids, v.generation));
  const std::string id = service.NextRequestId("chatcmpl");
  const std::int64_t created = UnixSeconds();
  const auto prompt_tokens = static_cast<std::int64_t>(ids.size());
  auto choices = std::make_shared<std::vector<ChatChoice>>();
  for (std::size_t k = 0; k < gens.size(); ++k)
    choices->emplace_back(service, k, ChatChoiceOptions{logprobs, return_token_ids}, output, prompt);
  RestReply reply;
  if (body.stream) {
    auto totals = std::make_shared<StreamTotals>();
    totals->prompt = prompt_tokens;
    auto chunk = [&service, id, created](json choices) {
      return json{{"id", id},
                  {"object", "chat.completion.chunk"},
                  {"created", created},
                  {"model", service.name()},
                  {"choices", std::move(choices)}};
    };
    auto on_delta = [return_token_ids, chunk, totals, ids, choices](std::size_t i, const service::Generation::Delta& d,
                                                                    std::string& out) {
      // Counted even when nothing is sent (a tool call held back).
      totals->completion += static_cast<std::int64_t>(d.ids.size());
      if (i == 0) totals->cached += d.cached_tokens;
      std::optional<json> choice = (*choices)[i].Push(d);
      if (!choice) return;
      const bool first = (*choice)["delta"].contains("role");
      json ev = chunk(json::array({std::move(*choice)}));
      if (return_token_ids && i == 0 && first) ev["prompt_token_ids"] = ids;
      out += Event(ev);
    };
    reply.events =
        std::make_unique<GenerationStream>(std::move(gens), on_delta, UsageChunk(body.include_usage, chunk, totals));
    return reply;
  }
  RS_ASSIGN_OR_RETURN(auto results, service::Generation::CollectAll(gens, request.client_gone));
  json out_choices = json::array();
  std::int64_t completion_tokens = 0;
  for (std::size_t k = 0; k < results.size(); ++k) {
    completion_tokens += static_cast<std::int64_t>(results[k].generated_ids.size());
    out_choices.push_back((*choices)[k].Whole(results[k]));
  }
  json out = {{"id", id},
              {"object", "chat.completion"},
              {"created", created},
              {"model", service.name()},
              {"choices", std::move(out_choices)},
              {"usage", Usage(prompt_tokens, completion_tokens, results.empty() ? 0 : results[0].cached_tokens)}};
  if (return_token_ids) out["prompt_token_ids"] = ids;
  if (body.prompt_logprobs && !results.empty())
    out["prompt_logprobs"] = VllmPromptLogprobs(service, ids, results[0].prompt_logprobs, results[0].prompt_ranks,
                                                results[0].prompt_top_logprobs);
  reply.body = Dump(out);
  return reply;
}

}  // namespace ropeserve::api
