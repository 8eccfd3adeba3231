// `ropeserve generate`: offline generation for one prompt, used by tests and
// parity checks against other implementations.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "server/cli/commands.h"
#include "server/common/json_file.h"
#include "server/models/decoder.h"
#include "server/service/input_processor.h"
#include "server/service/request_params.h"
#include "server/serving/service_factory.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve::cli {

namespace {

struct GenerateFlags {
  SpeculativeFlags speculative;
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  service::GenerationFields fields;  // unset: the validator's defaults (gRPC Generate's)
  bool json = false;
  bool ignore_eos = false;
  // Structured output (at most one): a JSON Schema file, a regex, choices.
  std::string json_schema;
  std::string regex;
  std::vector<std::string> choices;
  // float32 by default: this is the command parity checks run, and bf16
  // would round the logits they compare.
  std::string dtype = "float32";
  std::string quantization = "none";
  std::string device = "cpu";
  bool enforce_eager = false;
};

int Run(const GenerateFlags& f) {
  // The model directory's tokenizer.json: required for --prompt, and used
  // to print text when present.
  std::shared_ptr<const tok::Tokenizer> tokenizer;
  const bool has_tokenizer = std::filesystem::exists(std::filesystem::path(f.model) / "tokenizer.json");
  if (has_tokenizer || !f.prompt.empty()) {
    auto t = tok::Tokenizer::FromPath(f.model);
    if (!t.ok()) return Fail(t.status().message());
    tokenizer = *t;
  }
  // The prompt: text (tokenized as the tokenizer's post-processor says: BOS
  // for Llama/Mistral, nothing for Qwen, like transformers'
  // tokenizer(text)), or ids.
  service::GenerationRequest input;
  if (!f.prompt.empty()) {
    input.prompts.push_back(service::Prompt{f.prompt, {}});
    input.prompt_param = "prompt";
  } else {
    auto ids = ParseIdList(f.prompt_ids, "--prompt-ids");
    if (!ids.ok()) return Fail(ids.status().message());
    input.prompts.push_back(service::Prompt{std::nullopt, *ids});
    input.prompt_param = "prompt_ids";
  }

  auto model =
      DecoderModel::Load(f.model, ResolveComputeDType(f.dtype, f.model, f.device == "cpu"),
                         ParseQuantization(f.quantization).value_or(Quantization::kNone), at::Device(f.device));
  if (!model.ok()) return Fail(model.status().ToString());

  // The serving path, driven from this thread: the same scheduler, runner,
  // sampler and output processor (detokenization, stop strings).
  OfflineOptions eo;
  eo.max_num_seqs = 1;
  eo.enforce_eager = f.enforce_eager;
  auto speculative = SpeculativeFrom(f.speculative);
  if (!speculative.ok()) return Fail(speculative.status().message());
  eo.speculative = *speculative;
  auto service = OfflineDecoder(**model, eo, tokenizer);
  if (!service.ok()) return Fail(service.status().ToString());
  // The same input processor (tokenizer, ids, defaults, ranges) as gRPC Generate.
  service::GenerationFields fields = f.fields;
  if (f.ignore_eos) fields.ignore_eos = true;
  using K = structured::Constraint::Kind;
  if (!f.json_schema.empty()) {
    auto text = ReadTextFile(f.json_schema);
    if (!text.ok()) return Fail("--json-schema: " + text.status().message());
    fields.constraint = {K::kJsonSchema, *text, {}, "json_schema"};
  } else if (!f.regex.empty()) {
    fields.constraint = {K::kRegex, f.regex, {}, "regex"};
  } else if (!f.choices.empty()) {
    fields.constraint = {K::kChoice, "", f.choices, "choice"};
  }
  input.fields = std::move(fields);
  input.endpoint = service::Endpoint::kGenerate;
  auto validated = service::PrepareGeneration(**service, input);
  if (!validated.ok()) {
    std::string flag = validated.status().param();
    std::replace(flag.begin(), flag.end(), '_', '-');
    return Fail((flag.empty() ? std::string() : "--" + flag + ": ") + validated.status().message());
  }
  const std::vector<std::int64_t>& prompt_ids = validated->prompts[0];
  // Text mode streams the decoded text as it arrives.
  const bool stream = tokenizer && !f.json;
  auto on_delta = [&](std::size_t, const service::Generation::Delta& d) {
    if (stream) std::cout << d.text << std::flush;
  };
  auto results = (*service)->GenerateBatch({prompt_ids}, validated->generation, false, on_delta);
  if (!results.ok()) {
    const Status status = results.status();  // by value: status() returns a copy
    const std::string& p = status.param();
    return Fail((p.empty() ? std::string() : "--" + p.substr(0, p.find('.')) + ": ") + status.message());
  }
  const GenerateResult* result = &(*results)[0];

  if (f.json) {
    nlohmann::json out;
    out["prompt_ids"] = result->prompt_ids;
    out["generated_ids"] = result->generated_ids;
    out["text"] = result->text;  // skip_special_tokens=true; "" without a tokenizer.json
    out["finish_reason"] = result->finish_reason;
    out["logprobs"] = result->logprobs;
    nlohmann::json top = nlohmann::json::array();
    for (const auto& step : result->top_logprobs) {
      nlohmann::json s = nlohmann::json::array();
      for (const auto& t : step) s.push_back({{"id", t.id}, {"logprob", t.logprob}});
      top.push_back(s);
    }
    out["top_logprobs"] = top;
    const double decoded = static_cast<double>(result->generated_ids.size()) - 1;
    out["timing"] = {{"prefill_seconds", result->prefill_seconds},
                     {"decode_seconds", result->decode_seconds},
                     {"decode_tokens_per_second",
                      decoded > 0 && result->decode_seconds > 0 ? decoded / result->decode_seconds : 0.0}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    if (stream) std::cout << "\n";
    for (std::size_t i = 0; i < result->generated_ids.size(); ++i)
      std::cout << (i ? " " : "") << result->generated_ids[i];
    std::cout << "\nfinish_reason: " << result->finish_reason << "\n";
  }
  return 0;
}

}  // namespace

Runner AddGenerate(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* sub = app.add_subcommand("generate", "Generate tokens for one prompt, offline (no server)");
  sub->add_option("--model", f->model, "Checkpoint directory in Hugging Face layout")
      ->required()
      ->check(CLI::ExistingDirectory);
  auto* text = sub->add_option(
      "--prompt", f->prompt,
      "Prompt text, tokenized with the model's tokenizer.json (special tokens added as its post-processor says)");
  auto* ids = sub->add_option("--prompt-ids", f->prompt_ids, "Prompt as comma-separated token ids, e.g. 1,15043");
  text->excludes(ids);
  // Defaults and ranges are the request validator's (docs/api.md).
  service::GenerationFields& g = f->fields;
  sub->add_option("--max-tokens", g.max_tokens, "Tokens to generate (default 16)");
  sub->add_option("--temperature", g.temperature, "0 = greedy (the default)");
  sub->add_option("--top-p", g.top_p, "Nucleus sampling mass (default 1)");
  sub->add_option("--top-k", g.top_k, "Keep the k most likely tokens (0 = all, the default)");
  sub->add_option("--min-p", g.min_p, "Drop tokens below min_p x the top probability (default 0)");
  sub->add_option("--seed", g.seed, "Random seed for sampling");
  sub->add_option("--repetition-penalty", g.repetition_penalty,
                  "Penalize tokens already in the prompt or output (> 0; 1 = off, the default)");
  sub->add_option("--frequency-penalty", g.frequency_penalty,
                  "Subtract this per earlier occurrence in the output [-2, 2]");
  sub->add_option("--presence-penalty", g.presence_penalty, "Subtract this once if the token was generated [-2, 2]");
  sub->add_option("--min-tokens", g.min_tokens, "Do not stop at EOS before this many tokens");
  sub->add_option("--stop", g.stop,
                  "Stop when the output text contains this string (repeatable; needs tokenizer.json)");
  sub->add_option("--top-logprobs", g.top_logprobs, "Report the K most likely tokens per step (max 20)");
  sub->add_flag("--json", f->json, "Print one JSON object: prompt_ids, generated_ids, text, top_logprobs");
  sub->add_flag("--ignore-eos", f->ignore_eos, "Do not stop at the model's EOS tokens");
  auto* schema =
      sub->add_option("--json-schema", f->json_schema,
                      "Structured output: the text is JSON valid against this JSON Schema file (docs/api.md)");
  auto* regex = sub->add_option("--regex", f->regex, "Structured output: the text matches this regular expression");
  auto* choice = sub->add_option("--choice", f->choices, "Structured output: the text is one of these (repeatable)");
  schema->excludes(regex)->excludes(choice);
  regex->excludes(choice);
  sub->add_option("--dtype", f->dtype, "Compute dtype (auto = bfloat16 for bf16 checkpoints, else float32)")
      ->capture_default_str()
      ->check(CLI::IsMember(kDTypeChoices));
  sub->add_option("--quantization", f->quantization, kQuantizationHelp)
      ->capture_default_str()
      ->check(CLI::IsMember(kQuantizationChoices));
  sub->add_option("--device", f->device, kDeviceHelp)->capture_default_str()->check(DeviceValidator());
  sub->add_flag("--enforce-eager", f->enforce_eager,
                "As serve's (CUDA only): every step eager, no CUDA graphs (by default decode steps replay them, "
                "as serve's do)");
  AddSpeculativeFlags(sub, f->speculative);
  sub->callback([sub] {
    if (sub->count("--prompt") + sub->count("--prompt-ids") == 0)
      throw CLI::ValidationError("--prompt or --prompt-ids", "one of them is required");
  });
  return [f] { return Run(*f); };
}

}  // namespace ropeserve::cli
