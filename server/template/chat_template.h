// Chat templates: renders a conversation with the model's Jinja template
// the way transformers' apply_chat_template does (context: messages,
// add_generation_prompt, bos_token, eos_token, plus caller variables).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

#include "server/common/status.h"
#include "server/template/jinja.h"

namespace ropeserve {

struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  std::optional<std::string> bos_token, eos_token;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // other variables (tools, date_string, ...)
};

class ChatTemplate {
 public:
  // Parses the template source; errors name the line. (A
  // tokenizer_config.json's template: tok::ReadTokenizerConfig.)
  static StatusOr<ChatTemplate> FromSource(const std::string& source);

  // `messages` must be a list of objects with a string "role". A template's
  // raise_exception comes back as FailedPrecondition with its message.
  StatusOr<std::string> Render(const nlohmann::ordered_json& messages, const ChatTemplateOptions& opts) const;

 private:
  std::shared_ptr<const jinja::Template> tmpl_;
};

}  // namespace ropeserve
