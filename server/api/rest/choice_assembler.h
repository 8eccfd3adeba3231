// One choice of a completions or chat response, assembled by the same code
// whether its output arrives in deltas (a stream: each Push gives that
// chunk's choice) or whole (unary: the result pushed as one finished delta,
// WholeDelta). So a stream's chunks, folded (texts and token ids joined,
// logprobs appended, the last finish reason), are the unary choice; the
// API tests hold the two equal.
//
// Also the OpenAI shapes of what a choice carries: token logprobs in the
// completions and chat shapes, vLLM's prompt_logprobs, usage.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/service/chat_output.h"
#include "server/service/generation.h"
#include "server/service/generation_service.h"

namespace ropeserve::api {

// A run of tokens' logprobs in the completions shape: per token its text,
// logprob, alternatives and `text_offset` (`offset` carries the bytes
// before it across a stream's chunks); the first `unscored` tokens have
// none (null: an echoed prompt's first token).
nlohmann::json CompletionLogprobs(const service::GenerationService& service, const std::vector<std::int64_t>& ids,
                                  const std::vector<double>& logprobs,
                                  const std::vector<std::vector<TokenLogprob>>& tops, std::int64_t& offset,
                                  std::size_t unscored = 0);
// ... in the chat shape ({"content": [{token, logprob, bytes, top_logprobs}]}).
nlohmann::json ChatLogprobs(const service::GenerationService& service, const std::vector<std::int64_t>& ids,
                            const std::vector<double>& logprobs, const std::vector<std::vector<TokenLogprob>>& tops);
// vLLM's prompt_logprobs: null for the first prompt token, then
// {"<id>": {logprob, rank, decoded_token}} for the token and its alternatives.
nlohmann::json VllmPromptLogprobs(const service::GenerationService& service, const std::vector<std::int64_t>& prompt,
                                  const std::vector<double>& logprobs, const std::vector<std::int64_t>& ranks,
                                  const std::vector<std::vector<TokenLogprob>>& tops);
nlohmann::json Usage(std::int64_t prompt, std::int64_t completion, std::int64_t cached);

// A whole result as one finished delta (what a unary reply assembles).
service::OutputDelta WholeDelta(const GenerateResult& result);

// One prompt of a completions request, shared by its choices: its ids, its
// text for echo (as given, or decoded), and its logprobs
// (options.prompt_logprobs), which its first choice computes (StartN) in
// deltas before its first token; every choice of the prompt reads them here.
struct CompletionPrompt {
  std::vector<std::int64_t> ids;
  std::string echo_text;
  std::vector<double> logprobs;
  std::vector<std::int64_t> ranks;
  std::vector<std::vector<TokenLogprob>> tops;
  void AddScores(const service::OutputDelta& d);
};

struct CompletionChoiceOptions {
  bool logprobs = false;         // `logprobs` set: the completions logprobs object
  bool token_ids = false;        // return_token_ids: token_ids, and prompt_token_ids first
  bool echo = false;             // the prompt's text (and logprobs) before the output
  bool prompt_logprobs = false;  // vLLM's prompt_logprobs, first
};

// One choice of /v1/completions.
class CompletionChoice {
 public:
  // `computes_scores`: this is the prompt's first choice, whose deltas
  // carry the prompt's logprobs into `prompt`.
  CompletionChoice(const service::GenerationService& service, std::size_t index, CompletionChoiceOptions options,
                   std::shared_ptr<CompletionPrompt> prompt, bool computes_scores);
  // The choice's part for `d`: {"index", "text", "logprobs", "finish_reason"}
  // and what the options add; nullopt while `d` has nothing to send (only
  // prompt logprobs, which go out with the first token).
  std::optional<nlohmann::json> Push(const service::OutputDelta& d);

 private:
  const service::GenerationService& service_;
  std::size_t index_;
  CompletionChoiceOptions options_;
  std::shared_ptr<CompletionPrompt> prompt_;
  bool computes_scores_;
  bool started_ = false;
  std::int64_t offset_ = 0;  // text_offset so far
};

struct ChatChoiceOptions {
  bool logprobs = false;   // the chat logprobs object
  bool token_ids = false;  // return_token_ids: token_ids per chunk
};

// One choice of /v1/chat/completions: its content, reasoning and tool
// calls split by one ChatOutputProcessor (server/service/chat_output.h).
class ChatChoice {
 public:
  ChatChoice(const service::GenerationService& service, std::size_t index, ChatChoiceOptions options,
             const service::ChatOutputOptions& output, std::string_view prompt);
  // A stream's chunk choice for `d`: {"index", "delta", "logprobs",
  // "finish_reason"} (the first carries the role; tool calls come whole in
  // the last); nullopt when there is nothing to send yet.
  std::optional<nlohmann::json> Push(const service::OutputDelta& d);
  // The unary choice: {"index", "message", "finish_reason", "logprobs"}
  // from the whole result (null for a part the output does not have, as vLLM).
  nlohmann::json Whole(const GenerateResult& r);

 private:
  // index, logprobs, finish_reason and token_ids of a choice of `ids`.
  nlohmann::json Common(const std::vector<std::int64_t>& ids, const std::vector<double>& logprobs,
                        const std::vector<std::vector<TokenLogprob>>& tops, const nlohmann::json& finish_reason) const;

  const service::GenerationService& service_;
  std::size_t index_;
  ChatChoiceOptions options_;
  service::ChatOutputOptions output_;
  std::string prompt_;
  service::ChatOutputProcessor processor_;
  bool started_ = false;
};

}  // namespace ropeserve::api
