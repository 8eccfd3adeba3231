#include "server/service/input_processor.h"

#include <utility>

#include "server/service/generation_service.h"

namespace ropeserve::service {

StatusOr<PreparedGeneration> PrepareGeneration(const GenerationService& service, const GenerationRequest& r) {
  RS_RETURN_IF_ERROR(service.CheckModelName(r.model));
  // vLLM's truncate_prompt_tokens: at most k tokens, cut from the left, as
  // vLLM's tokenizer (truncation_side="left") does: a text prompt keeps its
  // added special tokens (BOS) and the last tokens of its text; a chat
  // prompt (its template writes the special tokens) and an id prompt keep
  // their last k tokens.
  RS_ASSIGN_OR_RETURN(std::optional<std::size_t> keep, PromptTruncation(r.fields, service.limits()));
  const std::size_t keep_last = keep.value_or(0);
  std::vector<std::vector<std::int64_t>> prompts;
  std::string rendered_chat;
  if (r.chat) {
    RS_ASSIGN_OR_RETURN(rendered_chat,
                        service.ApplyChatTemplate(r.chat->messages, r.chat->add_generation_prompt, r.chat->extra));
    RS_ASSIGN_OR_RETURN(auto ids, service.Tokenize(rendered_chat, /*add_special_tokens=*/false, keep_last));
    if (ids.empty()) return InvalidArgument("the chat template rendered an empty prompt").WithParam("messages");
    prompts.push_back(std::move(ids));
  } else {
    if (r.prompts.empty()) return InvalidArgument("a prompt is required").WithParam(r.prompt_param);
    for (const Prompt& p : r.prompts) {
      if (p.text) {
        RS_ASSIGN_OR_RETURN(auto ids, service.Tokenize(*p.text, /*add_special_tokens=*/true, keep_last));
        prompts.push_back(std::move(ids));
      } else {
        RS_RETURN_IF_ERROR(ValidatePromptIds(p.ids, service.limits(), r.prompt_param));
        const std::size_t from = keep_last > 0 && p.ids.size() > keep_last ? p.ids.size() - keep_last : 0;
        prompts.emplace_back(p.ids.begin() + static_cast<std::ptrdiff_t>(from), p.ids.end());
      }
    }
  }
  std::vector<std::size_t> lengths;
  for (const auto& p : prompts) lengths.push_back(p.size());
  RS_ASSIGN_OR_RETURN(ValidatedGeneration v,
                      ValidateGeneration(r.fields, r.endpoint, lengths, service.limits(), r.timeout_seconds));
  return PreparedGeneration{std::move(prompts), std::move(rendered_chat), v.WithTrace(r.trace)};
}

}  // namespace ropeserve::service
