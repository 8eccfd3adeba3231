// Reading the REST endpoints' request bodies into transport-neutral fields
// (server/service/request_params.h), before any model is involved.
//
// Strict, as OpenAI's API is: a body that is not a JSON object, a field of
// the wrong type, an unknown field, or a field whose value asks for
// something ropeserve does not implement (suffix, best_of > 1, audio,
// guided_grammar, ...) is a 400 naming the field in `param`.
// Fields that change nothing about the output are accepted and ignored
// (user, metadata, service_tier, store: false). docs/api.md lists every
// accepted field per endpoint.
//
// Torch-free and model-free: tests/fuzz/rest_request_fuzz.cc fuzzes it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/common/status.h"
#include "server/service/encoder_service.h"
#include "server/service/input_processor.h"
#include "server/service/request_params.h"
#include "server/service/tool_calls.h"

namespace ropeserve::api {

// A prompt: text (tokenized with the tokenizer's special tokens) or ids.
using PromptInput = service::Prompt;

// What the generation endpoints share.
struct GenerationBody {
  std::string model;  // "" = the served model
  std::string user;   // OpenAI's `user`: logged with the request, nothing else
  service::GenerationFields fields;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool return_token_ids = false;  // vLLM extension
  bool logprobs = false;          // logprobs were asked for (fields.top_logprobs holds how many alternatives)
  bool prompt_logprobs = false;   // vLLM's prompt_logprobs was given (fields.prompt_logprobs: how many)
};

struct CompletionBody : GenerationBody {
  std::vector<PromptInput> prompts;  // one, or a list
  bool echo = false;                 // the prompt is returned before the completion (with logprobs: its tokens' too)
};

struct ChatBody : GenerationBody {
  // The messages with content parts joined into one string per message,
  // the caller's key order kept (templates render tools with tojson).
  nlohmann::ordered_json messages;
  // Template variables: documents and chat_template_kwargs.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  // vLLM's include_reasoning: false drops the reasoning_content of models
  // that reason (server/service/reasoning.h).
  bool include_reasoning = true;
  // tools / tool_choice / parallel_tool_calls (server/service/tool_calls.h);
  // required and named choices also set fields.constraint.
  service::ToolRequest tools;
};

struct SummarizeBody : GenerationBody {
  service::SummaryFields summary;  // text, instruction, long-document options
};

// One question over one context, or over several passages.
struct QaInput {
  std::string question;
  std::string context;
  std::vector<service::QaPassage> passages;  // "contexts"; `context` unused when set
  bool multi = false;                        // "contexts" was given
};

// /v1/qa: {"question", "context" | "contexts", options...}, a batch
// {"inputs": [...], options...}, or the Hugging Face pipeline's
// {"inputs": {...} | [...], "parameters": {options...}}.
// `retrieve` on /v1/qa: rank each question's passages with an encoder
// (a cross-encoder or an embedder's cosine) and read only the best.
struct QaRetrieve {
  std::string model;       // empty: the first encoder that scores pairs
  std::int64_t top_k = 3;  // passages kept per question
};

struct QaBody {
  std::string model;
  std::vector<QaInput> inputs;
  bool batch = false;  // "inputs": [...] (answers come back as "results")
  service::QaFields fields;
  std::optional<QaRetrieve> retrieve;
};

// POST /v1/embeddings (OpenAI, with vLLM's `normalize`) or TEI's /embed:
// texts or token-id lists, and the embedding options.
struct EmbeddingsBody {
  std::string model;
  std::vector<service::EncoderInput> inputs;
  service::EmbedOptions options;
  bool base64 = false;  // encoding_format "base64"
  bool tei = false;     // TEI's /embed shape
};

// POST /classify (vLLM's shape) or TEI's /predict: texts (TEI: or pairs)
// for a sequence classifier.
struct ClassifyBody {
  std::string model;
  std::vector<service::EncoderInput> inputs;
  service::ClassifyOptions options;
  bool tei = false;
  bool tei_batch = false;  // TEI: the input was a batch (a list of lists per input back)
};

// POST /score (vLLM: text_1, text_2), /rerank, /v1/rerank, /v2/rerank
// (vLLM's Jina/Cohere shape: query, documents, top_n, return_documents)
// or TEI's /rerank (query, texts, raw_scores, return_text).
struct ScoreBody {
  enum class Shape { kScore, kRerank, kTeiRerank };
  Shape shape = Shape::kScore;
  std::string model;
  std::vector<std::string> queries, documents;
  service::ScoreOptions options;
  std::int64_t top_n = 0;  // rerank: the best N (0: all)
  bool return_documents = true;
};

// POST /v1/token-classify: texts for a token classifier, grouped into
// entities as transformers' pipeline does (aggregation_strategy,
// ignore_labels), their offsets in `offset_unit` (as /v1/qa's).
struct TokenClassifyBody {
  std::string model;
  std::vector<service::EncoderInput> inputs;
  service::TokenClassifyOptions options;
  qa::OffsetUnit offset_unit = qa::OffsetUnit::kCodePoint;
};

// POST /tokenize (vLLM): a prompt, or chat messages rendered with the
// chat template.
struct TokenizeBody {
  std::string model;
  bool chat = false;  // `messages` given instead of `prompt`
  std::string prompt;
  nlohmann::ordered_json messages;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  bool add_special_tokens = true;  // default: true for a prompt, false for messages (vLLM)
  bool return_token_strs = false;
};

// POST /detokenize (vLLM).
struct DetokenizeBody {
  std::string model;
  std::vector<std::int64_t> tokens;
};

StatusOr<CompletionBody> ReadCompletionBody(const std::string& text);
StatusOr<ChatBody> ReadChatBody(const std::string& text);
// A chat body already parsed: what the translations of other APIs'
// requests (Anthropic's Messages) read through, so that their prompts,
// fields and tools get the chat endpoint's checks.
StatusOr<ChatBody> ReadChatObject(nlohmann::ordered_json body);

// POST /v1/completions/render and /v1/chat/completions/render (vLLM's
// render endpoints, which llm-d's router tokenizes prompts through): the
// generation request's body, read and checked as the endpoint reads it
// (a body the endpoint refuses, render refuses), plus what only render
// reads.
struct RenderOptions {
  std::string request_id;             // "" = a new id per prompt
  bool return_token_offsets = false;  // each token's code-point offsets in its text
};
struct CompletionRenderBody {
  CompletionBody body;
  RenderOptions render;
};
struct ChatRenderBody {
  ChatBody body;
  RenderOptions render;
};
StatusOr<CompletionRenderBody> ReadCompletionRenderBody(const std::string& text);
StatusOr<ChatRenderBody> ReadChatRenderBody(const std::string& text);

// POST /v1/messages (Anthropic's Messages API, rest_messages_request.cc):
// the body translated into a chat request. Errors name Anthropic's fields.
StatusOr<ChatBody> ReadMessagesBody(const std::string& text);
// POST /v1/messages/count_tokens: the same body without max_tokens (and
// without the generation fields).
StatusOr<ChatBody> ReadCountTokensBody(const std::string& text);
// An error about a chat field, naming the Anthropic field it came from
// (stop -> stop_sequences, user -> metadata.user_id).
Status WithAnthropicParam(Status s);
// POST /v1/responses (OpenAI's Responses API, rest_responses_request.cc):
// the body's fields as a chat request, before the conversation of a
// previous response is put between the instructions and the input.
struct ResponsesBody {
  nlohmann::ordered_json chat;  // a chat body without "messages"
  std::optional<std::string> instructions;
  // This request's input items as chat messages, and per message the index
  // of the input item it came from (errors name the item).
  nlohmann::ordered_json input = nlohmann::ordered_json::array();
  std::vector<std::size_t> origin;
  // The input items as GET /v1/responses/{id}/input_items lists them (each
  // with an id and a status).
  nlohmann::ordered_json items = nlohmann::ordered_json::array();
  std::string previous_response_id;
  bool store = true;
  bool background = false;
  bool stream = false;
  bool summary = false;  // reasoning.summary: reasoning items carry a summary
  // The response object's fields that echo the request, in OpenAI's order.
  nlohmann::ordered_json echo;
};
// The Responses API's own checks; the chat reader's come with ResponsesChat.
StatusOr<ResponsesBody> ReadResponsesBody(const std::string& text);
// The chat request of a response, read and checked by the chat reader:
// instructions, then `history` (the conversation of previous_response_id,
// chat messages), then the input. Errors name the Responses field
// (input[i], max_output_tokens, ...).
StatusOr<ChatBody> ResponsesChat(const ResponsesBody& body, const nlohmann::ordered_json& history);
// An error about a chat field, naming the Responses field it came from
// (max_tokens -> max_output_tokens, response_format -> text.format).
Status WithResponsesParam(Status s);
StatusOr<SummarizeBody> ReadSummarizeBody(const std::string& text);
StatusOr<QaBody> ReadQaBody(const std::string& text);
StatusOr<TokenizeBody> ReadTokenizeBody(const std::string& text);
// `tei`: TEI's /embed ({"inputs", "normalize", "truncate",
// "truncation_direction", "prompt_name", "dimensions"}); else OpenAI's
// /v1/embeddings ({"model", "input", "encoding_format", "dimensions",
// "user"}, plus "normalize", "truncate", "prompt_name").
StatusOr<EmbeddingsBody> ReadEmbeddingsBody(const std::string& text, bool tei);
StatusOr<DetokenizeBody> ReadDetokenizeBody(const std::string& text);
// `tei`: TEI's /predict ({"inputs": text | [text, text] (a pair) | a list
// of those, "raw_scores", "truncate", "truncation_direction"}); else vLLM's
// /classify ({"model", "input": text | [text], "activation", "truncate"}).
StatusOr<ClassifyBody> ReadClassifyBody(const std::string& text, bool tei);
// `rerank`: /rerank's body, TEI's shape when it has "texts"; else /score's.
StatusOr<ScoreBody> ReadScoreBody(const std::string& text, bool rerank);
StatusOr<TokenClassifyBody> ReadTokenClassifyBody(const std::string& text);

}  // namespace ropeserve::api
