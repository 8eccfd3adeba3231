// POST /tokenize and POST /detokenize, with vLLM's request and response
// shapes (RAG chunkers and lm-eval count tokens through them).
#include <nlohmann/json.hpp>

#include "server/api/rest/rest_handlers.h"
#include "server/api/rest/rest_request.h"
#include "server/common/json_text.h"

namespace ropeserve::api {

using json = nlohmann::json;

// {"prompt": "..."} or {"messages": [...]} -> {"count", "max_model_len",
// "tokens", "token_strs"}; token_strs (the vocabulary's pieces, as
// convert_ids_to_tokens gives them) with "return_token_strs": true, else null.
StatusOr<RestReply> Tokenize(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(TokenizeBody body, ReadTokenizeBody(request.body));
  RS_RETURN_IF_ERROR(service.CheckModelName(body.model));
  std::string text = std::move(body.prompt);
  if (body.chat) {
    RS_ASSIGN_OR_RETURN(text, service.ApplyChatTemplate(body.messages, body.add_generation_prompt, body.extra));
  }
  RS_ASSIGN_OR_RETURN(auto ids, service.Tokenize(text, body.add_special_tokens));
  json strs = nullptr;
  if (body.return_token_strs) {
    strs = json::array();
    for (auto id : ids) {
      const std::string* piece = service.tokenizer()->IdToToken(static_cast<TokenId>(id));
      strs.push_back(piece != nullptr ? *piece : std::string());
    }
  }
  RestReply reply;
  reply.body = Dump({{"count", ids.size()},
                     {"max_model_len", service.max_model_len()},
                     {"tokens", ids},
                     {"token_strs", std::move(strs)}});
  return reply;
}

// {"tokens": [ids]} -> {"prompt": text}, special tokens kept (vLLM).
StatusOr<RestReply> Detokenize(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(DetokenizeBody body, ReadDetokenizeBody(request.body));
  RS_RETURN_IF_ERROR(service.CheckModelName(body.model));
  auto text = service.Detokenize(body.tokens, /*skip_special_tokens=*/false);
  if (!text.ok())
    return text.status().code() == ErrorCode::kInvalidArgument ? text.status().WithParam("tokens") : text.status();
  RestReply reply;
  reply.body = Dump({{"prompt", *text}});
  return reply;
}

}  // namespace ropeserve::api
