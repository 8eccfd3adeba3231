// POST /tokenize and POST /detokenize, with vLLM's request and response
// shapes (RAG chunkers and lm-eval count tokens through them).
#include <nlohmann/json.hpp>

#include "server/api/json_request.h"
#include "server/api/rest_handlers.h"
#include "server/api/rest_request.h"

namespace ropeserve::api {

using json = nlohmann::json;

namespace {
Status NeedsTokenizer() {
  return FailedPrecondition("this server has no tokenizer.json for its model; it cannot tokenize text");
}
}  // namespace

// {"prompt": "..."} or {"messages": [...]} -> {"count", "max_model_len",
// "tokens", "token_strs"}; token_strs (the vocabulary's pieces, as
// convert_ids_to_tokens gives them) with "return_token_strs": true, else null.
StatusOr<RestReply> Tokenize(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(TokenizeBody body, ReadTokenizeBody(request.body));
  RS_RETURN_IF_ERROR(service.CheckModelName(body.model));
  if (service.tokenizer() == nullptr) return NeedsTokenizer();
  std::string text = std::move(body.prompt);
  if (body.chat) {
    RS_ASSIGN_OR_RETURN(text, service.ApplyChatTemplate(body.messages, body.add_generation_prompt, body.extra));
  }
  RS_ASSIGN_OR_RETURN(auto ids, service.Tokenize(text, body.add_special_tokens));
  json strs = nullptr;
  if (body.return_token_strs) {
    strs = json::array();
    for (auto id : ids) {
      const std::string* piece = service.tokenizer()->IdToToken(static_cast<std::uint32_t>(id));
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
  const tok::Tokenizer* t = service.tokenizer();
  if (t == nullptr) return NeedsTokenizer();
  std::vector<std::uint32_t> ids;
  ids.reserve(body.tokens.size());
  for (auto id : body.tokens) {
    if (id < 0 || id > static_cast<std::int64_t>(UINT32_MAX) || t->IdToToken(static_cast<std::uint32_t>(id)) == nullptr)
      return InvalidArgument("token id " + std::to_string(id) + " is not in the tokenizer's vocabulary")
          .WithParam("tokens");
    ids.push_back(static_cast<std::uint32_t>(id));
  }
  RS_ASSIGN_OR_RETURN(std::string text, t->Decode(ids, /*skip_special_tokens=*/false));
  RestReply reply;
  reply.body = Dump({{"prompt", text}});
  return reply;
}

}  // namespace ropeserve::api
