// `ropeserve chat-template`: renders a conversation (JSON array of messages
// on stdin) with a model's chat template, exactly as the server will.
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "server/cli/commands.h"
#include "server/template/chat_template.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve::cli {

namespace {

struct ChatTemplateFlags {
  std::string tokenizer_config;
  std::string template_file;
  bool add_generation_prompt = false;
  std::optional<std::string> bos_token, eos_token;
  std::vector<std::string> vars;
};

int RunChatTemplate(const ChatTemplateFlags& f) {
  StatusOr<ChatTemplate> tmpl = Status(ErrorCode::kInvalidArgument, "");
  ChatTemplateOptions o;
  o.add_generation_prompt = f.add_generation_prompt;
  if (!f.tokenizer_config.empty()) {
    // The config's own special tokens, unless given on the command line.
    auto cfg = tok::ReadTokenizerConfig(f.tokenizer_config);
    if (!cfg.ok()) return Fail(cfg.status().message());
    if (!cfg->chat_template) {
      return Fail(f.tokenizer_config + (cfg->named_templates.empty() ? " has no chat_template"
                                                                     : ": chat_template list has no 'default' entry"));
    }
    tmpl = ChatTemplate::FromSource(*cfg->chat_template);
    if (!tmpl.ok()) tmpl = tmpl.status().WithContext(f.tokenizer_config);
    o.bos_token = cfg->bos_token;
    o.eos_token = cfg->eos_token;
  } else {
    std::ifstream in(f.template_file, std::ios::binary);
    if (!in) return Fail("cannot open template file " + f.template_file);
    std::string src((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    tmpl = ChatTemplate::FromSource(src);
  }
  if (!tmpl.ok()) return Fail(tmpl.status().message());
  if (f.bos_token) o.bos_token = f.bos_token;
  if (f.eos_token) o.eos_token = f.eos_token;
  for (const std::string& kv : f.vars) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return Fail("--var expects key=value, got '" + kv + "'");
    const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    // JSON values (true, 3, [..], {..}, "..") are typed; anything else is a string.
    auto parsed = nlohmann::ordered_json::parse(value, nullptr, false);
    o.extra[key] = parsed.is_discarded() ? nlohmann::ordered_json(value) : parsed;
  }
  std::stringstream ss;
  ss << std::cin.rdbuf();
  auto messages = nlohmann::ordered_json::parse(ss.str(), nullptr, false);
  if (messages.is_discarded()) return Fail("stdin is not valid JSON (expected an array of messages)");
  auto out = tmpl->Render(messages, o);
  if (!out.ok()) return Fail(out.status().message());
  std::cout << *out;
  std::cout.flush();
  return 0;
}

}  // namespace

Runner AddChatTemplate(CLI::App& app) {
  auto f = std::make_shared<ChatTemplateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "chat-template",
      "Render a chat template: reads a JSON array of messages ([{\"role\":...,\"content\":...}]) from stdin and\n"
      "prints the rendered prompt (no trailing newline added). Exits 1 with the template's message if it raises.");
  auto* cfg = cmd->add_option("--tokenizer-config", f->tokenizer_config,
                              "tokenizer_config.json holding chat_template (its bos/eos tokens are used)");
  auto* tpl = cmd->add_option("--template", f->template_file, "A Jinja template file");
  cfg->excludes(tpl);
  tpl->excludes(cfg);
  cmd->add_flag("--add-generation-prompt", f->add_generation_prompt, "Append the assistant turn opener");
  cmd->add_option("--bos-token", f->bos_token, "bos_token variable");
  cmd->add_option("--eos-token", f->eos_token, "eos_token variable");
  cmd->add_option("--var", f->vars, "Extra variable key=value (value parsed as JSON if it is JSON)")->take_all();
  cmd->callback([cmd, cfg, tpl] {
    if (cfg->count() + tpl->count() != 1) throw CLI::RequiredError("--tokenizer-config or --template");
    (void)cmd;
  });
  return [f] { return RunChatTemplate(*f); };
}

}  // namespace ropeserve::cli
