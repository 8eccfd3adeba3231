// The input side of every generation request (vLLM's Processor): the model
// name checked, the prompt (texts, chat messages or token ids) templated
// and tokenized, ids checked against the vocabulary, and the fields
// validated with the endpoint's defaults and limits (request_params.h).
// REST completions and chat, gRPC Generate and `ropeserve generate` read
// their wire format into a GenerationRequest and call PrepareGeneration;
// what comes back goes to GenerationService::Start / StartN as it is (they
// take only a ValidatedGeneration).
// Document summaries (DocumentSummarizer) plan their chunks first, then
// send each request they run (chunk, reduce, final) through it as ids.
// Nothing below re-validates: the engine only asserts (engine.h).
//
// Errors name the request's field in Status::param(). Torch-free;
// thread-safe (it only reads the service).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/common/status.h"
#include "server/common/trace_context.h"
#include "server/service/request_params.h"

namespace ropeserve::service {

class GenerationService;

// A prompt as text (tokenized with the tokenizer's special tokens, as
// transformers' tokenizer(text)), or as token ids.
struct Prompt {
  std::optional<std::string> text;
  std::vector<std::int64_t> ids;
};

// Chat messages, rendered with the model's chat template and tokenized
// without added special tokens (the template writes them).
struct ChatPrompt {
  nlohmann::ordered_json messages;  // content parts already joined (the transport's reader)
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // template variables
  bool add_generation_prompt = true;
};

struct GenerationRequest {
  std::string model;            // "" = the served model
  std::vector<Prompt> prompts;  // one or more; or
  std::optional<ChatPrompt> chat;
  GenerationFields fields;
  Endpoint endpoint = Endpoint::kGenerate;
  double timeout_seconds = 0;  // the transport's deadline (0 = none)
  TraceContext trace;
  // The field named by errors about the prompt ("prompt", "prompt_ids", ...).
  std::string prompt_param = "prompt";
};

struct PreparedGeneration {
  std::vector<std::vector<std::int64_t>> prompts;  // token ids, checked; one per chat
  std::string rendered_chat;                       // chat: the rendered template
  ValidatedGeneration generation;                  // the options (the trace set) and n
};

StatusOr<PreparedGeneration> PrepareGeneration(const GenerationService& service, const GenerationRequest& request);

}  // namespace ropeserve::service
