#include "server/api/rest/rest_handlers.h"

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <functional>
#include <mutex>

#include "server/api/error_mapping.h"
#include "server/api/http/event_stream.h"
#include "server/api/rest/rest_request.h"
#include "server/common/json_text.h"
#include "server/common/unix_time.h"
#include "server/service/chat_output.h"
#include "server/service/input_processor.h"

namespace ropeserve::api {

using json = nlohmann::json;

namespace {

using service::Endpoint;

// ---- response formatting ----

// A token as text for logprobs: its decoded string with a tokenizer, else
// "token_id:N" (vLLM's return_tokens_as_token_ids format).
std::string TokenText(const service::GenerationService& service, std::int64_t id) {
  if (const tok::Tokenizer* t = service.tokenizer(); t != nullptr && id >= 0 && id <= INT32_MAX) {
    auto s = t->Decode({static_cast<TokenId>(id)}, false);
    if (s.ok()) return *s;
  }
  return "token_id:" + std::to_string(id);
}

// Logprobs of a run of tokens in the completions API's shape: per token
// its text, logprob, alternatives and `text_offset` (bytes of the token
// texts before it, as vLLM counts; `offset` carries it across the chunks of
// a stream). The first `unscored` tokens have no logprob (null: an echoed
// prompt's first token); logprobs[i] and tops[i] belong to token
// unscored + i. A token is always among its own top_logprobs (OpenAI: up
// to logprobs + 1 entries).
json CompletionLogprobs(const service::GenerationService& service, const std::vector<std::int64_t>& ids,
                        const std::vector<double>& logprobs, const std::vector<std::vector<TokenLogprob>>& tops,
                        std::int64_t& offset, std::size_t unscored = 0) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::string text = TokenText(service, ids[i]);
    offsets.push_back(offset);
    offset += static_cast<std::int64_t>(text.size());
    if (i < unscored || i - unscored >= logprobs.size()) {
      tokens.push_back(std::move(text));
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    const std::size_t k = i - unscored;
    token_logprobs.push_back(logprobs[k]);
    json step = json::object();
    step[text] = logprobs[k];
    if (k < tops.size())
      for (const auto& t : tops[k]) {
        // Two tokens can decode to the same text (e.g. partial UTF-8
        // bytes); keep both by naming the later one by its id.
        if (t.id == ids[i]) continue;
        std::string key = TokenText(service, t.id);
        if (step.contains(key)) key = "token_id:" + std::to_string(t.id);
        step[key] = t.logprob;
      }
    top.push_back(std::move(step));
    tokens.push_back(std::move(text));
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

// `a` followed by `b` (two logprobs objects of the completions shape).
json JoinLogprobs(json a, const json& b) {
  for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const auto& v : b[k]) a[k].push_back(v);
  return a;
}

// vLLM's prompt_logprobs: per prompt token, null for the first, else
// {"<id>": {"logprob", "rank", "decoded_token"}} for the token and the
// alternatives (ranked 1, 2, ... in order).
json VllmPromptLogprobs(const service::GenerationService& service, const std::vector<std::int64_t>& prompt,
                        const std::vector<double>& logprobs, const std::vector<std::int64_t>& ranks,
                        const std::vector<std::vector<TokenLogprob>>& tops) {
  json out = json::array();
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    if (i == 0 || i - 1 >= logprobs.size()) {
      out.push_back(nullptr);
      continue;
    }
    json step = json::object();
    if (i - 1 < tops.size())
      for (std::size_t k = 0; k < tops[i - 1].size(); ++k) {
        const TokenLogprob& t = tops[i - 1][k];
        step[std::to_string(t.id)] = {
            {"logprob", t.logprob}, {"rank", k + 1}, {"decoded_token", TokenText(service, t.id)}};
      }
    step[std::to_string(prompt[i])] = {{"logprob", logprobs[i - 1]},
                                       {"rank", i - 1 < ranks.size() ? ranks[i - 1] : 0},
                                       {"decoded_token", TokenText(service, prompt[i])}};
    out.push_back(std::move(step));
  }
  return out;
}

// ... and in the chat API's shape.
// `bytes` is the token text's UTF-8 bytes (OpenAI: a token may be part of
// a character, and then `token` alone cannot be joined back).
json ChatLogprobs(const service::GenerationService& service, const std::vector<std::int64_t>& ids,
                  const std::vector<double>& logprobs, const std::vector<std::vector<TokenLogprob>>& tops) {
  auto entry = [&service](std::int64_t id, double logprob) {
    const std::string text = TokenText(service, id);
    json bytes = json::array();
    for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
    return json{{"token", text}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
  };
  json content = json::array();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    json top = json::array();
    if (i < tops.size())
      for (const auto& t : tops[i]) top.push_back(entry(t.id, t.logprob));
    json e = entry(ids[i], logprobs[i]);
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", content}};
}

json Usage(std::int64_t prompt, std::int64_t completion, std::int64_t cached) {
  json u = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  u["prompt_tokens_details"] = {{"cached_tokens", cached}};
  return u;
}

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
  // Echo: the prompt's text as given (token-id prompts: decoded, special
  // tokens kept).
  std::vector<std::string> prompt_texts;
  if (echo) {
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      if (body.prompts[p].text) {
        prompt_texts.push_back(*body.prompts[p].text);
      } else if (service.tokenizer() != nullptr) {
        RS_ASSIGN_OR_RETURN(std::string text, service.Detokenize(prompts[p], /*skip_special_tokens=*/false));
        prompt_texts.push_back(std::move(text));
      } else {
        prompt_texts.emplace_back();
      }
    }
  }
  RS_ASSIGN_OR_RETURN(auto gens, StartAll(service, prompts, prepared.generation));
  const std::string id = service.NextRequestId("cmpl");
  const std::int64_t created = UnixSeconds();
  const std::int64_t prompt_tokens = PromptTokens(prompts);
  const std::size_t n = static_cast<std::size_t>(prepared.generation.n());
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
    auto started = std::make_shared<std::vector<bool>>(gens.size(), false);
    auto offsets = std::make_shared<std::vector<std::int64_t>>(gens.size(), 0);
    // Prompt logprobs come (possibly in several deltas) before a choice's
    // first token; they go out with its first chunk.
    struct PromptPart {
      std::vector<double> logprobs;
      std::vector<std::int64_t> ranks;
      std::vector<std::vector<TokenLogprob>> tops;
    };
    auto prompt_parts = std::make_shared<std::vector<PromptPart>>(gens.size());
    auto on_delta = [&service, logprobs, return_token_ids, echo, vllm_prompt_logprobs, prompt_texts, prompt_parts,
                     chunk, totals, started, offsets, prompts,
                     n](std::size_t i, const service::Generation::Delta& d, std::string& out) {
      PromptPart& part = (*prompt_parts)[i];
      part.logprobs.insert(part.logprobs.end(), d.prompt_logprobs.begin(), d.prompt_logprobs.end());
      part.ranks.insert(part.ranks.end(), d.prompt_ranks.begin(), d.prompt_ranks.end());
      part.tops.insert(part.tops.end(), d.prompt_top_logprobs.begin(), d.prompt_top_logprobs.end());
      if (d.ids.empty() && d.text.empty() && !d.finished) return;  // prompt logprobs only: wait for the token
      totals->completion += static_cast<std::int64_t>(d.ids.size());
      if (i % n == 0) totals->cached += d.cached_tokens;
      const bool first = !(*started)[i];
      json choice = {{"index", i},
                     {"text", (echo && first ? prompt_texts[i / n] : std::string()) + d.text},
                     {"logprobs", nullptr},
                     {"finish_reason", d.finished ? json(d.finish_reason) : json(nullptr)}};
      if (logprobs) {
        json lp = CompletionLogprobs(service, d.ids, d.logprobs, d.top_logprobs, (*offsets)[i]);
        if (echo && first) {
          std::int64_t at = 0;
          json head = CompletionLogprobs(service, prompts[i / n], part.logprobs, part.tops, at, 1);
          // The completion's offsets follow the prompt's.
          for (auto& o : lp["text_offset"]) o = o.get<std::int64_t>() + at;
          (*offsets)[i] += at;
          lp = JoinLogprobs(std::move(head), lp);
        }
        choice["logprobs"] = std::move(lp);
      }
      if (vllm_prompt_logprobs && first)
        choice["prompt_logprobs"] = VllmPromptLogprobs(service, prompts[i / n], part.logprobs, part.ranks, part.tops);
      if (return_token_ids) {
        choice["token_ids"] = d.ids;
        if (!(*started)[i]) choice["prompt_token_ids"] = prompts[i / n];  // first chunk of the choice
      }
      (*started)[i] = true;
      out += Event(chunk(json::array({choice})));
    };
    reply.events =
        std::make_unique<GenerationStream>(std::move(gens), on_delta, UsageChunk(body.include_usage, chunk, totals));
    return reply;
  }
  RS_ASSIGN_OR_RETURN(auto results, service::Generation::CollectAll(gens, request.client_gone));
  json choices = json::array();
  std::int64_t completion_tokens = 0, cached = 0;
  for (std::size_t k = 0; k < results.size(); ++k) {
    const GenerateResult& r = results[k];
    completion_tokens += static_cast<std::int64_t>(r.generated_ids.size());
    if (k % n == 0) cached += r.cached_tokens;
    // Prompt logprobs: the first choice of each prompt has them (StartN).
    const GenerateResult& head = results[k - k % n];
    json choice = {{"index", k},
                   {"text", (echo ? prompt_texts[k / n] : std::string()) + r.text},
                   {"finish_reason", r.finish_reason},
                   {"logprobs", nullptr}};
    std::int64_t offset = 0;
    if (logprobs) {
      json lp;
      if (echo)
        lp = CompletionLogprobs(service, prompts[k / n], head.prompt_logprobs, head.prompt_top_logprobs, offset, 1);
      json gen = CompletionLogprobs(service, r.generated_ids, r.logprobs, r.top_logprobs, offset);
      choice["logprobs"] = echo ? JoinLogprobs(std::move(lp), gen) : std::move(gen);
    }
    if (vllm_prompt_logprobs)
      choice["prompt_logprobs"] = VllmPromptLogprobs(service, prompts[k / n], head.prompt_logprobs, head.prompt_ranks,
                                                     head.prompt_top_logprobs);
    if (return_token_ids) {
      choice["token_ids"] = r.generated_ids;
      choice["prompt_token_ids"] = prompts[k / n];
    }
    choices.push_back(std::move(choice));
  }
  reply.body = Dump({{"id", id},
                     {"object", "text_completion"},
                     {"created", created},
                     {"model", service.name()},
                     {"choices", std::move(choices)},
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
  RestReply reply;
  if (body.stream) {
    auto totals = std::make_shared<StreamTotals>();
    totals->prompt = prompt_tokens;
    auto started = std::make_shared<std::vector<bool>>(gens.size(), false);
    auto chunk = [&service, id, created](json choices) {
      return json{{"id", id},
                  {"object", "chat.completion.chunk"},
                  {"created", created},
                  {"model", service.name()},
                  {"choices", std::move(choices)}};
    };
    auto outputs = std::make_shared<std::vector<service::ChatOutputProcessor>>(
        gens.size(), service::ChatOutputProcessor(output, prompt));
    auto on_delta = [&service, logprobs, return_token_ids, chunk, totals, started, ids, outputs](
                        std::size_t i, const service::Generation::Delta& d, std::string& out) {
      if (d.ids.empty() && d.text.empty() && !d.finished) return;  // nothing for the client yet
      totals->completion += static_cast<std::int64_t>(d.ids.size());
      if (i == 0) totals->cached += d.cached_tokens;
      json delta = json::object();
      if (!(*started)[i]) {
        // The first chunk of each choice carries the role (OpenAI).
        (*started)[i] = true;
        delta["role"] = "assistant";
      }
      // Tool calls are held back and sent whole in the last chunk.
      service::ChatOutputProcessor::Delta split = (*outputs)[i].Push(d.text, d.finished, d.finish_reason);
      if (!split.reasoning.empty()) delta["reasoning_content"] = split.reasoning;
      if (!split.calls.empty()) delta["tool_calls"] = service::ToolCallsJson(split.calls, /*with_index=*/true);
      const std::string& finish_reason = split.finish_reason;
      if (!split.content.empty() || delta.contains("role")) delta["content"] = split.content;
      // Nothing to send while a call is held back (unless per-token data was asked for).
      if (delta.empty() && !d.finished && !logprobs && !return_token_ids) return;
      json choice = {{"index", i},
                     {"delta", delta},
                     {"logprobs", nullptr},
                     {"finish_reason", d.finished ? json(finish_reason) : json(nullptr)}};
      if (logprobs) choice["logprobs"] = ChatLogprobs(service, d.ids, d.logprobs, d.top_logprobs);
      if (return_token_ids) choice["token_ids"] = d.ids;
      json ev = chunk(json::array({choice}));
      if (return_token_ids && i == 0 && delta.contains("role")) ev["prompt_token_ids"] = ids;
      out += Event(ev);
    };
    reply.events =
        std::make_unique<GenerationStream>(std::move(gens), on_delta, UsageChunk(body.include_usage, chunk, totals));
    return reply;
  }
  RS_ASSIGN_OR_RETURN(auto results, service::Generation::CollectAll(gens, request.client_gone));
  json choices = json::array();
  std::int64_t completion_tokens = 0;
  for (std::size_t k = 0; k < results.size(); ++k) {
    const GenerateResult& r = results[k];
    completion_tokens += static_cast<std::int64_t>(r.generated_ids.size());
    service::ChatMessage m = service::ChatOutputProcessor::Whole(output, prompt, r.text, r.finish_reason);
    // As vLLM: null for a part the output does not have.
    json message = {{"role", "assistant"}, {"content", m.content ? json(*m.content) : json(nullptr)}};
    if (output.reasons) message["reasoning_content"] = m.reasoning ? json(*m.reasoning) : json(nullptr);
    if (!m.calls.empty()) message["tool_calls"] = service::ToolCallsJson(m.calls, /*with_index=*/false);
    json choice = {
        {"index", k}, {"message", std::move(message)}, {"finish_reason", m.finish_reason}, {"logprobs", nullptr}};
    if (logprobs) choice["logprobs"] = ChatLogprobs(service, r.generated_ids, r.logprobs, r.top_logprobs);
    if (return_token_ids) choice["token_ids"] = r.generated_ids;
    choices.push_back(std::move(choice));
  }
  json out = {{"id", id},
              {"object", "chat.completion"},
              {"created", created},
              {"model", service.name()},
              {"choices", std::move(choices)},
              {"usage", Usage(prompt_tokens, completion_tokens, results.empty() ? 0 : results[0].cached_tokens)}};
  if (return_token_ids) out["prompt_token_ids"] = ids;
  if (body.prompt_logprobs && !results.empty())
    out["prompt_logprobs"] = VllmPromptLogprobs(service, ids, results[0].prompt_logprobs, results[0].prompt_ranks,
                                                results[0].prompt_top_logprobs);
  reply.body = Dump(out);
  return reply;
}

}  // namespace ropeserve::api
