#include "server/api/rest_handlers.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>

#include "server/api/error_mapping.h"
#include "server/api/json_request.h"

namespace ropeserve::api {

using json = nlohmann::json;

namespace {

// ---- request parsing ----

// `prompt`: a string (tokenized with the tokenizer's special tokens), a
// list of token ids, or a list of either (several prompts).
StatusOr<std::vector<std::vector<std::int64_t>>> ReadPrompts(ModelService& service, const json& body) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return MalformedRequest("'prompt' is required");
  auto one = [&](const json& p) -> StatusOr<std::vector<std::int64_t>> {
    if (p.is_string()) {
      RS_ASSIGN_OR_RETURN(auto ids, service.Tokenize(p.get<std::string>(), /*add_special_tokens=*/true));
      if (ids.empty()) return InvalidArgument("'prompt' tokenizes to no tokens");
      return ids;
    }
    if (!p.is_array() || p.empty()) return MalformedRequest("a prompt must be a string or a non-empty list of token ids");
    std::vector<std::int64_t> ids;
    for (const auto& v : p) {
      if (!v.is_number_integer()) return MalformedRequest("a token-id prompt must contain only integers");
      if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        return InvalidArgument("prompt token id " + v.dump() + " is outside the vocabulary");
      ids.push_back(v.get<std::int64_t>());
    }
    return ids;
  };
  std::vector<std::vector<std::int64_t>> prompts;
  const json& p = *it;
  if (p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array())) {
    if (p.size() > 64) return InvalidArgument("at most 64 prompts per request");
    for (const auto& q : p) {
      RS_ASSIGN_OR_RETURN(auto ids, one(q));
      prompts.push_back(std::move(ids));
    }
  } else {
    RS_ASSIGN_OR_RETURN(auto ids, one(p));
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

// Fields shared by the generation endpoints.
struct Common {
  GenerateOptions options;
  bool max_tokens_given = false;
  std::int64_t logprobs = -1;  // -1 = not requested
  std::int64_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool return_token_ids = false;
};

enum class Api { kCompletions, kChat, kSummarize };

StatusOr<Common> ReadCommon(ModelService& service, const json& body, Api api, double timeout_seconds) {
  std::string model_name;
  RS_RETURN_IF_ERROR(ReadField(body, "model", model_name));
  RS_RETURN_IF_ERROR(service.CheckModelName(model_name));
  Common c;
  RS_RETURN_IF_ERROR(ReadField(body, "stream", c.stream));
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return MalformedRequest("'stream_options' must be an object");
    RS_RETURN_IF_ERROR(ReadField(*so, "include_usage", c.include_usage));
  }
  RS_RETURN_IF_ERROR(ReadField(body, "return_token_ids", c.return_token_ids));
  if (api != Api::kSummarize) RS_RETURN_IF_ERROR(ReadField(body, "n", c.n));
  if (c.n < 1 || c.n > ModelService::kMaxChoices) {
    return InvalidArgument("'n' must be between 1 and " + std::to_string(ModelService::kMaxChoices));
  }
  GenerateOptions& o = c.options;
  o.timeout_seconds = timeout_seconds;
  // OpenAI samples at temperature 1 by default; summaries are greedy unless
  // asked otherwise (the same text gives the same summary).
  o.sampling.temperature = api == Api::kSummarize ? 0.0 : 1.0;
  c.max_tokens_given = body.contains("max_tokens") && !body["max_tokens"].is_null();
  RS_RETURN_IF_ERROR(ReadField(body, "max_tokens", o.max_tokens));
  if (api == Api::kChat && body.contains("max_completion_tokens") && !body["max_completion_tokens"].is_null()) {
    c.max_tokens_given = true;
    RS_RETURN_IF_ERROR(ReadField(body, "max_completion_tokens", o.max_tokens));
  }
  if (c.max_tokens_given && (o.max_tokens < 1 || o.max_tokens > service.max_model_len())) {
    return InvalidArgument("'max_tokens' must be between 1 and the context length " +
                           std::to_string(service.max_model_len()));
  }
  RS_RETURN_IF_ERROR(ReadField(body, "temperature", o.sampling.temperature));
  RS_RETURN_IF_ERROR(ReadField(body, "top_p", o.sampling.top_p));
  RS_RETURN_IF_ERROR(ReadField(body, "top_k", o.sampling.top_k));
  if (o.sampling.top_k == -1) o.sampling.top_k = 0;  // vLLM's "all tokens"
  RS_RETURN_IF_ERROR(ReadField(body, "min_p", o.sampling.min_p));
  RS_RETURN_IF_ERROR(ReadField(body, "ignore_eos", o.ignore_eos));
  RS_RETURN_IF_ERROR(ReadField(body, "min_tokens", o.min_tokens));
  RS_RETURN_IF_ERROR(ReadField(body, "repetition_penalty", o.sampling.repetition_penalty));
  RS_RETURN_IF_ERROR(ReadField(body, "frequency_penalty", o.sampling.frequency_penalty));
  RS_RETURN_IF_ERROR(ReadField(body, "presence_penalty", o.sampling.presence_penalty));
  if (auto s = body.find("seed"); s != body.end() && !s->is_null()) {
    if (!s->is_number_integer()) return MalformedRequest("'seed' must be an integer");
    o.sampling.seed = s->is_number_unsigned() ? s->get<std::uint64_t>()
                                              : static_cast<std::uint64_t>(s->get<std::int64_t>());
  }
  if (auto st = body.find("stop"); st != body.end() && !st->is_null()) {
    if (st->is_string()) {
      o.stop.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      if (st->size() > 16) return InvalidArgument("'stop' may hold at most 16 strings");
      for (const auto& v : *st) {
        if (!v.is_string()) return MalformedRequest("'stop' must be a string or a list of strings");
        o.stop.push_back(v.get<std::string>());
      }
    } else {
      return MalformedRequest("'stop' must be a string or a list of strings");
    }
  }
  if (auto st = body.find("stop_token_ids"); st != body.end() && !st->is_null()) {
    if (!st->is_array()) return MalformedRequest("'stop_token_ids' must be a list of token ids");
    for (const auto& v : *st) {
      if (!v.is_number_integer()) return MalformedRequest("'stop_token_ids' must be a list of token ids");
      // Beyond int64: outside the vocabulary anyway.
      o.stop_token_ids.push_back(v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX ? -1 : v.get<std::int64_t>());
    }
  }
  if (api == Api::kChat) {
    // Chat: logprobs is a boolean and top_logprobs the count (OpenAI).
    bool want = false;
    RS_RETURN_IF_ERROR(ReadField(body, "logprobs", want));
    std::int64_t top = 0;
    RS_RETURN_IF_ERROR(ReadField(body, "top_logprobs", top));
    if (top < 0 || top > 20) return InvalidArgument("'top_logprobs' must be between 0 and 20");
    if (top > 0 && !want) return InvalidArgument("'top_logprobs' needs 'logprobs': true");
    c.logprobs = want ? top : -1;
  } else if (api == Api::kCompletions) {
    RS_RETURN_IF_ERROR(ReadField(body, "logprobs", c.logprobs));
    if (c.logprobs > 20 || (body.contains("logprobs") && !body["logprobs"].is_null() && c.logprobs < 0))
      return InvalidArgument("'logprobs' must be between 0 and 20");
  }
  o.top_logprobs = c.logprobs > 0 ? static_cast<std::size_t>(c.logprobs) : 0;
  return c;
}

// Without max_tokens: completions generate 16 tokens (OpenAI), chat until
// the context is full (vLLM), summaries at most 256 tokens.
void DefaultMaxTokens(Common& c, const ModelService& service, std::size_t prompt_len, Api api) {
  if (c.max_tokens_given) return;
  const std::int64_t room = std::max<std::int64_t>(1, service.max_model_len() - static_cast<std::int64_t>(prompt_len));
  if (api == Api::kChat) c.options.max_tokens = room;
  if (api == Api::kSummarize) c.options.max_tokens = std::min<std::int64_t>(256, room);
}

// ---- response formatting ----

// A token as text for logprobs: its decoded string with a tokenizer, else
// "token_id:N" (vLLM's return_tokens_as_token_ids format).
std::string TokenText(const ModelService& service, std::int64_t id) {
  if (const tok::Tokenizer* t = service.tokenizer()) {
    auto s = t->Decode({static_cast<uint32_t>(id)}, false);
    if (s.ok()) return *s;
  }
  return "token_id:" + std::to_string(id);
}

// Logprobs of a run of tokens, in the completions API's shape.
json CompletionLogprobs(const ModelService& service, const std::vector<std::int64_t>& ids,
                        const std::vector<double>& logprobs, const std::vector<std::vector<TokenLogprob>>& tops) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    tokens.push_back(TokenText(service, ids[i]));
    token_logprobs.push_back(logprobs[i]);
    json step = json::object();
    if (i < tops.size())
      for (const auto& t : tops[i]) {
        // Two tokens can decode to the same text (e.g. partial UTF-8
        // bytes); keep both by naming the later one by its id.
        std::string key = TokenText(service, t.id);
        if (step.contains(key)) key = "token_id:" + std::to_string(t.id);
        step[key] = t.logprob;
      }
    top.push_back(step);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}};
}

// ... and in the chat API's shape.
json ChatLogprobs(const ModelService& service, const std::vector<std::int64_t>& ids, const std::vector<double>& logprobs,
                  const std::vector<std::vector<TokenLogprob>>& tops) {
  json content = json::array();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    json top = json::array();
    if (i < tops.size())
      for (const auto& t : tops[i]) top.push_back({{"token", TokenText(service, t.id)}, {"logprob", t.logprob}});
    content.push_back({{"token", TokenText(service, ids[i])}, {"logprob", logprobs[i]}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json Usage(std::int64_t prompt, std::int64_t completion, std::int64_t cached) {
  json u = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  u["prompt_tokens_details"] = {{"cached_tokens", cached}};
  return u;
}

std::int64_t Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Event(const json& j) { return "data: " + Dump(j) + "\n\n"; }

// ---- streaming ----

// Multiplexes several generations (the choices of one request) into one
// event stream: callbacks turn each delta into events.
class GenerationStream : public EventSource {
 public:
  using OnDelta = std::function<void(std::size_t index, const Generation::Delta& d, std::string& out)>;
  using OnEnd = std::function<void(std::string& out)>;

  GenerationStream(std::vector<std::unique_ptr<Generation>> gens, OnDelta on_delta, OnEnd on_end)
      : gens_(std::move(gens)), on_delta_(std::move(on_delta)), on_end_(std::move(on_end)),
        signal_(std::make_shared<Signal>()) {
    for (auto& g : gens_) {
      g->SetNotify([s = signal_] {
        std::lock_guard<std::mutex> lock(s->mu);
        s->pending = true;
        s->cv.notify_all();
      });
    }
  }
  ~GenerationStream() override {
    for (auto& g : gens_) g->SetNotify(nullptr);
  }

  bool Poll(std::string& out, std::chrono::milliseconds wait) override {
    if (done_) return true;
    const std::size_t before = out.size();
    {
      std::lock_guard<std::mutex> lock(signal_->mu);
      signal_->pending = false;
    }
    bool all_finished = true;
    for (std::size_t i = 0; i < gens_.size(); ++i) {
      Generation& g = *gens_[i];
      if (g.finished()) continue;
      auto d = g.Next(std::chrono::milliseconds(0));
      if (!d.ok()) {
        // Mid-stream failure (deadline, engine error): one error event,
        // the other choices cancelled, then the end of the stream.
        out += "data: " + ErrorJson(d.status()) + "\n\n";
        out += "data: [DONE]\n\n";
        Cancel();
        done_ = true;
        return true;
      }
      if (!d->ids.empty() || !d->text.empty() || d->finished) on_delta_(i, *d, out);
      if (!g.finished()) all_finished = false;
    }
    if (all_finished) {
      on_end_(out);
      out += "data: [DONE]\n\n";
      done_ = true;
      return true;
    }
    if (out.size() == before) {
      std::unique_lock<std::mutex> lock(signal_->mu);
      signal_->cv.wait_for(lock, wait, [&] { return signal_->pending; });
    }
    return false;
  }

  void Cancel() override {
    for (auto& g : gens_) g->Cancel();
  }

 private:
  struct Signal {
    std::mutex mu;
    std::condition_variable cv;
    bool pending = false;
  };
  std::vector<std::unique_ptr<Generation>> gens_;
  OnDelta on_delta_;
  OnEnd on_end_;
  std::shared_ptr<Signal> signal_;
  bool done_ = false;
};


// Starts n choices for each prompt; choice index = prompt * n + k.
StatusOr<std::vector<std::unique_ptr<Generation>>> StartAll(ModelService& service,
                                                            const std::vector<std::vector<std::int64_t>>& prompts,
                                                            const GenerateOptions& options, int n) {
  std::vector<std::unique_ptr<Generation>> all;
  for (const auto& ids : prompts) {
    RS_ASSIGN_OR_RETURN(auto gens, service.StartN(ids, options, n));
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

StatusOr<RestReply> Completions(ModelService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(json body, ParseBody(request.body));
  RS_ASSIGN_OR_RETURN(Common c, ReadCommon(service, body, Api::kCompletions, request.timeout_seconds));
  RS_ASSIGN_OR_RETURN(auto prompts, ReadPrompts(service, body));
  RS_ASSIGN_OR_RETURN(auto gens, StartAll(service, prompts, c.options, static_cast<int>(c.n)));
  const std::string id = service.NextRequestId("cmpl");
  const std::int64_t created = Now();
  const std::int64_t prompt_tokens = PromptTokens(prompts);
  const std::size_t n = static_cast<std::size_t>(c.n);
  RestReply reply;
  if (c.stream) {
    auto totals = std::make_shared<StreamTotals>();
    totals->prompt = prompt_tokens;
    auto chunk = [&service, id, created](json choices) {
      return json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", service.name()},
                  {"choices", std::move(choices)}};
    };
    auto started = std::make_shared<std::vector<bool>>(gens.size(), false);
    auto on_delta = [&service, c, chunk, totals, started, prompts, n](std::size_t i, const Generation::Delta& d,
                                                                      std::string& out) {
      totals->completion += static_cast<std::int64_t>(d.ids.size());
      if (i % n == 0) totals->cached += d.cached_tokens;
      json choice = {{"index", i}, {"text", d.text}, {"logprobs", nullptr},
                     {"finish_reason", d.finished ? json(d.finish_reason) : json(nullptr)}};
      if (c.logprobs >= 0) choice["logprobs"] = CompletionLogprobs(service, d.ids, d.logprobs, d.top_logprobs);
      if (c.return_token_ids) {
        choice["token_ids"] = d.ids;
        if (!(*started)[i]) choice["prompt_token_ids"] = prompts[i / n];  // first chunk of the choice
      }
      (*started)[i] = true;
      out += Event(chunk(json::array({choice})));
    };
    reply.events = std::make_unique<GenerationStream>(std::move(gens), on_delta,
                                                      UsageChunk(c.include_usage, chunk, totals));
    return reply;
  }
  RS_ASSIGN_OR_RETURN(auto results, ModelService::CollectAll(gens));
  json choices = json::array();
  std::int64_t completion_tokens = 0, cached = 0;
  for (std::size_t k = 0; k < results.size(); ++k) {
    const GenerateResult& r = results[k];
    completion_tokens += static_cast<std::int64_t>(r.generated_ids.size());
    if (k % n == 0) cached += r.cached_tokens;
    json choice = {{"index", k}, {"text", r.text}, {"finish_reason", r.finish_reason}, {"logprobs", nullptr}};
    if (c.logprobs >= 0) choice["logprobs"] = CompletionLogprobs(service, r.generated_ids, r.logprobs, r.top_logprobs);
    if (c.return_token_ids) {
      choice["token_ids"] = r.generated_ids;
      choice["prompt_token_ids"] = prompts[k / n];
    }
    choices.push_back(std::move(choice));
  }
  reply.body = Dump({{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", service.name()},
                     {"choices", std::move(choices)}, {"usage", Usage(prompt_tokens, completion_tokens, cached)}});
  return reply;
}

// POST /v1/chat/completions: the messages are rendered with the model's
// chat template (add_generation_prompt=true), tokenized without adding
// special tokens (the template writes them), and generated like a
// completion.
StatusOr<RestReply> ChatCompletions(ModelService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(json body, ParseBody(request.body));
  RS_ASSIGN_OR_RETURN(Common c, ReadCommon(service, body, Api::kChat, request.timeout_seconds));
  auto mit = body.find("messages");
  if (mit == body.end() || !mit->is_array() || mit->empty()) {
    return MalformedRequest("'messages' must be a non-empty list of {\"role\", \"content\"} objects");
  }
  // Keep the caller's key order (tools rendered with tojson must not be
  // re-sorted): re-parse the body as ordered JSON.
  auto ordered = nlohmann::ordered_json::parse(request.body, nullptr, false);
  for (auto& m : ordered["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return MalformedRequest("each message must be an object with a string 'role'");
    if (!m.contains("content") || !m["content"].is_array()) continue;
    // OpenAI content parts ([{"type":"text","text":...}, ...]) become one
    // string (joined with newlines, as vLLM does for string templates).
    std::string joined;
    for (const auto& part : m["content"]) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
        return InvalidArgument("only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
      }
      if (!joined.empty()) joined += "\n";
      joined += part["text"].get<std::string>();
    }
    m["content"] = joined;
  }
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  for (const char* key : {"tools", "documents"}) {
    if (ordered.contains(key) && !ordered[key].is_null()) extra[key] = ordered[key];
  }
  if (ordered.contains("chat_template_kwargs") && ordered["chat_template_kwargs"].is_object()) {
    for (auto it = ordered["chat_template_kwargs"].begin(); it != ordered["chat_template_kwargs"].end(); ++it) {
      extra[it.key()] = it.value();
    }
  }
  bool add_generation_prompt = true;
  RS_RETURN_IF_ERROR(ReadField(body, "add_generation_prompt", add_generation_prompt));
  RS_ASSIGN_OR_RETURN(std::string prompt, service.ApplyChatTemplate(ordered["messages"], add_generation_prompt, extra));
  RS_ASSIGN_OR_RETURN(auto ids, service.Tokenize(prompt, /*add_special_tokens=*/false));
  if (ids.empty()) return InvalidArgument("the chat template rendered an empty prompt");
  DefaultMaxTokens(c, service, ids.size(), Api::kChat);
  RS_ASSIGN_OR_RETURN(auto gens, service.StartN(ids, c.options, static_cast<int>(c.n)));
  const std::string id = service.NextRequestId("chatcmpl");
  const std::int64_t created = Now();
  const auto prompt_tokens = static_cast<std::int64_t>(ids.size());
  RestReply reply;
  if (c.stream) {
    auto totals = std::make_shared<StreamTotals>();
    totals->prompt = prompt_tokens;
    auto started = std::make_shared<std::vector<bool>>(gens.size(), false);
    auto chunk = [&service, id, created](json choices) {
      return json{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", service.name()},
                  {"choices", std::move(choices)}};
    };
    auto on_delta = [&service, c, chunk, totals, started, ids](std::size_t i, const Generation::Delta& d, std::string& out) {
      totals->completion += static_cast<std::int64_t>(d.ids.size());
      if (i == 0) totals->cached += d.cached_tokens;
      json delta = json::object();
      if (!(*started)[i]) {
        // The first chunk of each choice carries the role (OpenAI).
        (*started)[i] = true;
        delta["role"] = "assistant";
      }
      if (!d.text.empty() || delta.contains("role")) delta["content"] = d.text;
      json choice = {{"index", i}, {"delta", delta}, {"logprobs", nullptr},
                     {"finish_reason", d.finished ? json(d.finish_reason) : json(nullptr)}};
      if (c.logprobs >= 0) choice["logprobs"] = ChatLogprobs(service, d.ids, d.logprobs, d.top_logprobs);
      if (c.return_token_ids) choice["token_ids"] = d.ids;
      json ev = chunk(json::array({choice}));
      if (c.return_token_ids && i == 0 && delta.contains("role")) ev["prompt_token_ids"] = ids;
      out += Event(ev);
    };
    reply.events = std::make_unique<GenerationStream>(std::move(gens), on_delta,
                                                      UsageChunk(c.include_usage, chunk, totals));
    return reply;
  }
  RS_ASSIGN_OR_RETURN(auto results, ModelService::CollectAll(gens));
  json choices = json::array();
  std::int64_t completion_tokens = 0;
  for (std::size_t k = 0; k < results.size(); ++k) {
    const GenerateResult& r = results[k];
    completion_tokens += static_cast<std::int64_t>(r.generated_ids.size());
    json choice = {{"index", k},
                   {"message", {{"role", "assistant"}, {"content", r.text}}},
                   {"finish_reason", r.finish_reason},
                   {"logprobs", nullptr}};
    if (c.logprobs >= 0) choice["logprobs"] = ChatLogprobs(service, r.generated_ids, r.logprobs, r.top_logprobs);
    if (c.return_token_ids) choice["token_ids"] = r.generated_ids;
    choices.push_back(std::move(choice));
  }
  json out = {{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", service.name()},
              {"choices", std::move(choices)},
              {"usage", Usage(prompt_tokens, completion_tokens, results.empty() ? 0 : results[0].cached_tokens)}};
  if (c.return_token_ids) out["prompt_token_ids"] = ids;
  reply.body = Dump(out);
  return reply;
}

// POST /v1/summarize (docs/api.md): the prompt comes from
// ModelService::SummaryPrompt; greedy by default.
StatusOr<RestReply> Summarize(ModelService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(json body, ParseBody(request.body));
  RS_ASSIGN_OR_RETURN(Common c, ReadCommon(service, body, Api::kSummarize, request.timeout_seconds));
  std::string text, instruction;
  if (!body.contains("text") || !body["text"].is_string()) return MalformedRequest("'text' (a string) is required");
  RS_RETURN_IF_ERROR(ReadField(body, "text", text));
  RS_RETURN_IF_ERROR(ReadField(body, "instruction", instruction));
  RS_ASSIGN_OR_RETURN(auto ids, service.SummaryPrompt(text, instruction));
  DefaultMaxTokens(c, service, ids.size(), Api::kSummarize);
  RS_ASSIGN_OR_RETURN(auto gen, service.Start(ids, c.options));
  const std::string id = service.NextRequestId("sum");
  const auto prompt_tokens = static_cast<std::int64_t>(ids.size());
  auto usage = [prompt_tokens](std::int64_t completion, std::int64_t cached) {
    return json{{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion}, {"cached_tokens", cached}};
  };
  RestReply reply;
  if (c.stream) {
    auto generated = std::make_shared<std::int64_t>(0);
    auto on_delta = [&service, id, generated, usage](std::size_t, const Generation::Delta& d, std::string& out) {
      *generated += static_cast<std::int64_t>(d.ids.size());
      if (!d.text.empty()) out += Event({{"id", id}, {"delta", d.text}});
      if (d.finished) {
        out += Event({{"id", id}, {"model", service.name()}, {"finish_reason", d.finish_reason},
                      {"usage", usage(*generated, d.cached_tokens)}});
      }
    };
    std::vector<std::unique_ptr<Generation>> gens;
    gens.push_back(std::move(gen));
    reply.events = std::make_unique<GenerationStream>(std::move(gens), on_delta, [](std::string&) {});
    return reply;
  }
  RS_ASSIGN_OR_RETURN(GenerateResult r, ModelService::Collect(*gen));
  reply.body = Dump({{"id", id}, {"model", service.name()}, {"summary", r.text}, {"finish_reason", r.finish_reason},
                     {"usage", usage(static_cast<std::int64_t>(r.generated_ids.size()), r.cached_tokens)}});
  return reply;
}

}  // namespace ropeserve::api
