// libFuzzer target: arbitrary REST bodies through the readers of every
// endpoint (server/api/rest/rest_request.h) and the request validator. Errors
// are fine; crashes, hangs, leaks and exceptions are not.
#include <cstdint>
#include <string>

#include "server/api/rest/rest_request.h"

namespace {

using namespace ropeserve;

service::Limits Limits() {
  service::Limits l;
  l.max_model_len = 4096;
  l.vocab_size = 32000;
  l.max_request_tokens = 1 << 16;
  return l;
}

// Prompts as the handlers see them after tokenizing: one token per byte.
void Generation(const api::GenerationBody& body, const std::vector<std::size_t>& lengths, service::Endpoint e) {
  (void)service::ValidateGeneration(body.fields, e, lengths, Limits(), 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 8) {
    case 0: {
      auto r = api::ReadCompletionBody(body);
      if (!r.ok()) return 0;
      std::vector<std::size_t> lengths;
      for (const auto& p : r->prompts) {
        if (!p.text) (void)service::ValidatePromptIds(p.ids, Limits(), "prompt");
        lengths.push_back(p.text ? p.text->size() : p.ids.size());
      }
      Generation(*r, lengths, service::Endpoint::kCompletions);
      break;
    }
    case 1: {
      auto r = api::ReadChatBody(body);
      if (r.ok()) Generation(*r, {r->messages.dump().size()}, service::Endpoint::kChat);
      break;
    }
    case 2: {
      auto r = api::ReadSummarizeBody(body);
      if (r.ok()) Generation(*r, {r->summary.text.size()}, service::Endpoint::kSummarize);
      break;
    }
    case 4:
      (void)api::ReadTokenizeBody(body);
      break;
    case 5:
      (void)api::ReadDetokenizeBody(body);
      break;
    case 6: {  // OpenAI's Responses API: its reader, then the chat reader
      auto r = api::ReadResponsesBody(body);
      if (!r.ok()) break;
      auto chat = api::ResponsesChat(*r, r->input);  // the input doubles as a stored conversation
      if (!chat.ok()) (void)api::WithResponsesParam(chat.status());
      if (chat.ok()) Generation(*chat, {chat->messages.dump().size()}, service::Endpoint::kChat);
      break;
    }
    case 7: {  // Anthropic's Messages API and its count_tokens
      auto r = api::ReadMessagesBody(body);
      if (r.ok()) Generation(*r, {r->messages.dump().size()}, service::Endpoint::kChat);
      (void)api::ReadCountTokensBody(body);
      break;
    }
    default: {  // the encoders' endpoints: /v1/qa, /v1/embeddings, /embed, /classify, /predict, /score, /rerank,
                // /v1/token-classify
      auto r = api::ReadQaBody(body);
      if (r.ok()) (void)service::ValidateQa(r->fields, 512);
      (void)api::ReadTokenClassifyBody(body);
      for (const bool tei : {false, true}) {
        (void)api::ReadEmbeddingsBody(body, tei);
        (void)api::ReadClassifyBody(body, tei);
        (void)api::ReadScoreBody(body, tei);
      }
      break;
    }
  }
  return 0;
}
