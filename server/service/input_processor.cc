#include "server/service/input_processor.h"

#include <utility>

#include "server/service/generation_service.h"

namespace ropeserve::service {

StatusOr<PreparedGeneration> PrepareGeneration(const GenerationService& service, const GenerationRequest& r) {
  RS_RETURN_IF_ERROR(service.CheckModelName(r.model));
  std::vector<std::vector<std::int64_t>> prompts;
  std::string rendered_chat;
  if (r.chat) {
    RS_ASSIGN_OR_RETURN(rendered_chat,
                        service.ApplyChatTemplate(r.chat->messages, r.chat->add_generation_prompt, r.chat->extra));
    RS_ASSIGN_OR_RETURN(auto ids, service.Tokenize(rendered_chat, /*add_special_tokens=*/false));
    if (ids.empty()) return InvalidArgument("the chat template rendered an empty prompt").WithParam("messages");
    prompts.push_back(std::move(ids));
  } else {
    if (r.prompts.empty()) return InvalidArgument("a prompt is required").WithParam(r.prompt_param);
    for (const Prompt& p : r.prompts) {
      if (p.text) {
        RS_ASSIGN_OR_RETURN(auto ids, service.Tokenize(*p.text, /*add_special_tokens=*/true));
        prompts.push_back(std::move(ids));
      } else {
        RS_RETURN_IF_ERROR(ValidatePromptIds(p.ids, service.limits(), r.prompt_param));
        prompts.push_back(p.ids);
      }
    }
  }
  // vLLM's truncate_prompt_tokens: the last k tokens (after the template
  // and the special tokens, as vLLM).
  RS_ASSIGN_OR_RETURN(std::optional<std::size_t> keep, PromptTruncation(r.fields, service.limits()));
  std::vector<std::size_t> lengths;
  for (auto& p : prompts) {
    if (keep && p.size() > *keep) p.erase(p.begin(), p.end() - static_cast<std::ptrdiff_t>(*keep));
    lengths.push_back(p.size());
  }
  RS_ASSIGN_OR_RETURN(ValidatedGeneration v,
                      ValidateGeneration(r.fields, r.endpoint, lengths, service.limits(), r.timeout_seconds));
  return PreparedGeneration{std::move(prompts), std::move(rendered_chat), v.WithTrace(r.trace)};
}

}  // namespace ropeserve::service
