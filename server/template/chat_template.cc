#include "server/template/chat_template.h"

namespace ropeserve {

StatusOr<ChatTemplate> ChatTemplate::FromSource(const std::string& source) {
  ChatTemplate t;
  RS_ASSIGN_OR_RETURN(t.tmpl_, jinja::Template::Parse(source));
  return t;
}

StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                           const ChatTemplateOptions& opts) const {
  if (!messages.is_array()) return InvalidArgument("messages must be a JSON array");
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return InvalidArgument("messages[" + std::to_string(i) + "] must be an object with a string 'role'");
    }
  }
  nlohmann::ordered_json ctx = opts.extra.is_object() ? opts.extra : nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  ctx["add_generation_prompt"] = opts.add_generation_prompt;
  if (opts.bos_token) ctx["bos_token"] = *opts.bos_token;
  if (opts.eos_token) ctx["eos_token"] = *opts.eos_token;
  return tmpl_->Render(ctx);
}

}  // namespace ropeserve
