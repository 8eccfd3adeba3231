#include "server/api/rest/choice_assembler.h"

#include <utility>

namespace ropeserve::api {

using json = nlohmann::json;

namespace {

// A token as text for logprobs: its decoded string with a tokenizer, else
// "token_id:N" (vLLM's return_tokens_as_token_ids format).
std::string TokenText(const service::GenerationService& service, std::int64_t id) {
  if (const tok::Tokenizer* t = service.tokenizer(); t != nullptr && id >= 0 && id <= INT32_MAX) {
    auto s = t->Decode({static_cast<TokenId>(id)}, false);
    if (s.ok()) return *s;
  }
  return "token_id:" + std::to_string(id);
}

// `a` followed by `b` (two logprobs objects of the completions shape).
json JoinLogprobs(json a, const json& b) {
  for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const auto& v : b[k]) a[k].push_back(v);
  return a;
}

}  // namespace

// Logprobs of a run of tokens in the completions API's shape: per token
// its text, logprob, alternatives and `text_offset` (bytes of the token
// texts before it, as vLLM counts; `offset` carries it across the chunks of
// a stream). The first `unscored` tokens have no logprob (null: an echoed
// prompt's first token); logprobs[i] and tops[i] belong to token
// unscored + i. A token is always among its own top_logprobs (OpenAI: up
// to logprobs + 1 entries).
json CompletionLogprobs(const service::GenerationService& service, const std::vector<std::int64_t>& ids,
                        const std::vector<double>& logprobs, const std::vector<std::vector<TokenLogprob>>& tops,
                        std::int64_t& offset, std::size_t unscored) {
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

service::OutputDelta WholeDelta(const GenerateResult& r) {
  service::OutputDelta d;
  d.ids = r.generated_ids;
  d.logprobs = r.logprobs;
  d.top_logprobs = r.top_logprobs;
  d.prompt_logprobs = r.prompt_logprobs;
  d.prompt_ranks = r.prompt_ranks;
  d.prompt_top_logprobs = r.prompt_top_logprobs;
  d.text = r.text;
  d.finished = true;
  d.finish_reason = r.finish_reason;
  d.stop_string = r.stop_string;
  d.cached_tokens = r.cached_tokens;
  return d;
}

void CompletionPrompt::AddScores(const service::OutputDelta& d) {
  logprobs.insert(logprobs.end(), d.prompt_logprobs.begin(), d.prompt_logprobs.end());
  ranks.insert(ranks.end(), d.prompt_ranks.begin(), d.prompt_ranks.end());
  tops.insert(tops.end(), d.prompt_top_logprobs.begin(), d.prompt_top_logprobs.end());
}

CompletionChoice::CompletionChoice(const service::GenerationService& service, std::size_t index,
                                   CompletionChoiceOptions options, std::shared_ptr<CompletionPrompt> prompt,
                                   bool computes_scores)
    : service_(service),
      index_(index),
      options_(options),
      prompt_(std::move(prompt)),
      computes_scores_(computes_scores) {}

std::optional<json> CompletionChoice::Push(const service::OutputDelta& d) {
  if (computes_scores_) prompt_->AddScores(d);
  if (d.ids.empty() && d.text.empty() && !d.finished) return std::nullopt;  // prompt logprobs only: wait
  const bool first = !started_;
  started_ = true;
  json choice = {{"index", index_},
                 {"text", (options_.echo && first ? prompt_->echo_text : std::string()) + d.text},
                 {"logprobs", nullptr},
                 {"finish_reason", d.finished ? json(d.finish_reason) : json(nullptr)}};
  if (options_.logprobs) {
    json lp;
    if (options_.echo && first)  // the prompt's tokens first; the output's offsets follow theirs
      lp = CompletionLogprobs(service_, prompt_->ids, prompt_->logprobs, prompt_->tops, offset_, 1);
    json gen = CompletionLogprobs(service_, d.ids, d.logprobs, d.top_logprobs, offset_);
    choice["logprobs"] = lp.is_null() ? std::move(gen) : JoinLogprobs(std::move(lp), gen);
  }
  if (options_.prompt_logprobs && first)
    choice["prompt_logprobs"] =
        VllmPromptLogprobs(service_, prompt_->ids, prompt_->logprobs, prompt_->ranks, prompt_->tops);
  if (options_.token_ids) {
    choice["token_ids"] = d.ids;
    if (first) choice["prompt_token_ids"] = prompt_->ids;
  }
  return choice;
}

ChatChoice::ChatChoice(const service::GenerationService& service, std::size_t index, ChatChoiceOptions options,
                       const service::ChatOutputOptions& output, std::string_view prompt)
    : service_(service),
      index_(index),
      options_(options),
      output_(output),
      prompt_(prompt),
      processor_(output, prompt) {}

json ChatChoice::Common(const std::vector<std::int64_t>& ids, const std::vector<double>& logprobs,
                        const std::vector<std::vector<TokenLogprob>>& tops, const json& finish_reason) const {
  json choice = {{"index", index_}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  if (options_.logprobs) choice["logprobs"] = ChatLogprobs(service_, ids, logprobs, tops);
  if (options_.token_ids) choice["token_ids"] = ids;
  return choice;
}

std::optional<json> ChatChoice::Push(const service::OutputDelta& d) {
  if (d.ids.empty() && d.text.empty() && !d.finished) return std::nullopt;  // nothing for the client yet
  json delta = json::object();
  if (!started_) {
    // The first chunk of each choice carries the role (OpenAI).
    started_ = true;
    delta["role"] = "assistant";
  }
  // Tool calls are held back and sent whole in the last chunk.
  service::ChatOutputProcessor::Delta split = processor_.Push(d.text, d.finished, d.finish_reason);
  if (!split.reasoning.empty()) delta["reasoning_content"] = split.reasoning;
  if (!split.calls.empty()) delta["tool_calls"] = service::ToolCallsJson(split.calls, /*with_index=*/true);
  if (!split.content.empty() || delta.contains("role")) delta["content"] = split.content;
  // Nothing to send while a call is held back (unless per-token data was asked for).
  if (delta.empty() && !d.finished && !options_.logprobs && !options_.token_ids) return std::nullopt;
  json choice = Common(d.ids, d.logprobs, d.top_logprobs, d.finished ? json(split.finish_reason) : json(nullptr));
  choice["delta"] = std::move(delta);
  return choice;
}

json ChatChoice::Whole(const GenerateResult& r) {
  service::ChatMessage m = service::ChatOutputProcessor::Whole(output_, prompt_, r.text, r.finish_reason);
  // As vLLM: null for a part the output does not have.
  json message = {{"role", "assistant"}, {"content", m.content ? json(*m.content) : json(nullptr)}};
  if (output_.reasons) message["reasoning_content"] = m.reasoning ? json(*m.reasoning) : json(nullptr);
  if (!m.calls.empty()) message["tool_calls"] = service::ToolCallsJson(m.calls, /*with_index=*/false);
  json choice = Common(r.generated_ids, r.logprobs, r.top_logprobs, json(m.finish_reason));
  choice["message"] = std::move(message);
  return choice;
}

}  // namespace ropeserve::api
