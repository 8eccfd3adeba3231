// `ropeserve qa` and `ropeserve encode`: a span model offline, for checking
// a checkpoint against another implementation. One input from the flags:
//   qa --question Q --context C [--json]   -> {"answers": [{"text","score","start","end"}]}
//   encode --input-ids 1,2,3 [--token-type-ids 0,0,1] [--json]
//       -> {"last_hidden_state": [[...], ...], "start_logits": [...], "end_logits": [...]}
//          (a classifier: "logits", [num_labels] or per token row-major)
// or, without those flags, JSON Lines on stdin with the same fields
// ({"question","context"} / {"ids","type_ids"?}), one output line per
// input line; an input that fails gets {"error": ...} and exit status 1.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>

#include "server/cli/commands.h"
#include "server/models/span_model_loader.h"
#include "server/qa/span_scoring.h"
#include "server/qa/windows.h"
#include "server/service/request_params.h"
#include "server/serving/service_factory.h"

namespace ropeserve::cli {

namespace {

using json = nlohmann::json;

struct QaFlags {
  std::string model;
  std::string device = "cpu";
  std::optional<std::string> question, context;  // qa: one input from the flags
  std::string input_ids, token_type_ids;         // encode: one input from the flags
  bool json = false;                             // flags mode: JSON output
  service::QaFields qa;                          // unset: the validator's defaults (docs/api.md)
  bool no_align_to_words = false;
  bool handle_impossible_answer = false;
  bool reference = false;  // encode: the per-window reference path
};

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The same flow as /v1/qa and gRPC Answer: the validator's defaults and
// ranges, then service::QaService (windows, forwards, answer selection).
StatusOr<json> Answer(service::QaService& service, const QaFlags& f, const json& in) {
  if (!in.is_object() || !in.contains("question") || !in["question"].is_string() || !in.contains("context") ||
      !in["context"].is_string())
    return InvalidArgument("expected {\"question\": \"...\", \"context\": \"...\"}");
  service::QaFields fields = f.qa;
  if (f.no_align_to_words) fields.align_to_words = false;
  if (f.handle_impossible_answer) fields.handle_impossible_answer = true;
  RS_ASSIGN_OR_RETURN(service::ValidatedQa v, service::ValidateQa(fields, service.config().max_position_embeddings));
  service::QaRequest r;
  r.question = in["question"].get<std::string>();
  r.context = in["context"].get<std::string>();
  r.windows = v.windows;
  r.options = v.options;
  RS_ASSIGN_OR_RETURN(service::QaResult result, service.Answer(r));
  json out = {{"answers", json::array()}, {"windows", result.windows}};
  for (const auto& a : result.answers)
    out["answers"].push_back({{"text", a.text}, {"score", a.score}, {"start", a.start}, {"end", a.end}});
  return out;
}

StatusOr<json> Encode(const SpanModel& model, const QaFlags& f, const json& in) {
  RS_ASSIGN_OR_RETURN(const std::vector<TokenId> ids, ReadJsonIdList(in, "ids"));
  std::vector<std::uint32_t> types;
  if (in.contains("type_ids")) {
    RS_ASSIGN_OR_RETURN(const std::vector<TokenId> t, ReadJsonIdList(in, "type_ids"));
    types.assign(t.begin(), t.end());
  }
  SpanLogits l;
  if (f.reference) {
    RS_ASSIGN_OR_RETURN(l, model.ForwardReference(ids, types, /*with_hidden=*/true));
  } else {
    RS_ASSIGN_OR_RETURN(auto packed, model.ForwardWindows({ids}, {types}, /*with_hidden=*/true));
    l = std::move(packed[0]);
  }
  const auto H = static_cast<std::size_t>(model.config().hidden_size);
  json hidden = json::array();
  for (std::size_t t = 0; t < ids.size(); ++t)
    hidden.push_back(std::vector<float>(l.hidden.begin() + static_cast<std::ptrdiff_t>(t * H),
                                        l.hidden.begin() + static_cast<std::ptrdiff_t>((t + 1) * H)));
  json out = {{"last_hidden_state", hidden}};
  if (!l.start.empty()) {
    out["start_logits"] = l.start;
    out["end_logits"] = l.end;
  }
  if (!l.classes.empty()) out["logits"] = l.classes;  // a classifier's: [num_labels] or [len * num_labels]
  return out;
}

int Run(const QaFlags& f, bool encode) {
  std::unique_ptr<SpanModel> model;
  std::unique_ptr<service::QaService> service;
  if (encode) {
    auto m = LoadSpanModel(f.model, DType::kF32, f.device);
    if (!m.ok()) return Fail(m.status().ToString());
    model = std::move(*m);
  } else {
    // Offline: no context-size limit beyond the window cap.
    service::QaServiceOptions o;
    o.max_context_bytes = std::size_t{1} << 30;
    auto s = LoadQaService(f.model, "qa", o, DType::kF32, f.device);
    if (!s.ok()) return Fail(s.status().ToString());
    service = std::move(*s);
  }
  // One input from the flags.
  if (f.question || f.context || !f.input_ids.empty()) {
    json in;
    if (encode) {
      in["ids"] = json::array();
      in["type_ids"] = json::array();
      for (auto [text, key, flag] : {std::tuple{&f.input_ids, "ids", "--input-ids"},
                                     std::tuple{&f.token_type_ids, "type_ids", "--token-type-ids"}}) {
        if (text->empty()) continue;
        auto ids = ParseIdList(*text, flag);
        if (!ids.ok()) return Fail(ids.status().message());
        // Non-negative ids as unsigned JSON numbers; Encode refuses the rest.
        for (std::int64_t v : *ids) v >= 0 ? in[key].push_back(static_cast<std::uint64_t>(v)) : in[key].push_back(v);
      }
      if (in["type_ids"].empty()) in.erase("type_ids");
    } else {
      if (!f.question || !f.context) return Fail("--question and --context go together");
      in = {{"question", *f.question}, {"context", *f.context}};
    }
    StatusOr<json> out = encode ? Encode(*model, f, in) : Answer(*service, f, in);
    if (!out.ok()) return Fail(out.status().ToString());
    if (f.json || encode) {
      std::printf("%s\n", Dump(*out).c_str());
    } else {
      for (const auto& a : (*out)["answers"])
        std::printf("%.6g\t[%lld, %lld)\t%s\n", a["score"].get<double>(), a["start"].get<long long>(),
                    a["end"].get<long long>(), a["text"].get<std::string>().c_str());
    }
    return 0;
  }
  int status = 0;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    json in = json::parse(line, nullptr, false);
    StatusOr<json> out = in.is_discarded() ? StatusOr<json>(InvalidArgument("line is not valid JSON"))
                         : encode          ? Encode(*model, f, in)
                                           : Answer(*service, f, in);
    if (out.ok()) {
      std::printf("%s\n", Dump(*out).c_str());
    } else {
      std::printf("%s\n", Dump({{"error", out.status().ToString()}}).c_str());
      status = 1;
    }
    std::fflush(stdout);
  }
  return status;
}

void AddModelFlag(CLI::App* sub, QaFlags& f) {
  sub->add_option("--model", f.model, "Span model directory (config.json, model.safetensors, tokenizer.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("--device", f.device, kDeviceHelp)->capture_default_str()->check(DeviceValidator());
}

}  // namespace

Runner AddQa(CLI::App& app) {
  auto f = std::make_shared<QaFlags>();
  CLI::App* sub = app.add_subcommand(
      "qa",
      "Extractive QA offline: --question Q --context C, or JSON Lines {\"question\",\"context\"} on stdin "
      "-> {\"answers\":[{\"text\",\"score\",\"start\",\"end\"}]} (docs/qa.md)");
  AddModelFlag(sub, *f);
  sub->add_option("--question", f->question, "The question (with --context; else JSON Lines on stdin)");
  sub->add_option("--context", f->context, "The context to find the answer in");
  sub->add_flag("--json", f->json, "Print {\"answers\": [...]} (default with --question: one answer per line)");
  // Defaults and ranges are the request validator's (docs/api.md), as for /v1/qa.
  sub->add_option("--max-question-len", f->qa.max_question_len, "Question tokens kept (default 64)");
  sub->add_option("--top-k", f->qa.top_k, "Answers to return (default 1, at most 100)");
  sub->add_option("--max-answer-len", f->qa.max_answer_len, "Longest answer in tokens (default 15)");
  sub->add_option("--max-seq-len", f->qa.max_seq_len, "Window length in tokens (default 384)");
  sub->add_option("--doc-stride", f->qa.doc_stride,
                  "Window overlap in tokens (default min(max_seq_len/2, 128), at most max_seq_len/2)");
  sub->add_flag("--handle-impossible-answer", f->handle_impossible_answer, "Allow the empty answer");
  sub->add_flag("--no-align-to-words", f->no_align_to_words, "Keep token offsets instead of whole words");
  sub->add_option("--scoring", f->qa.scoring, "pipeline (Hugging Face, default) or logits (SQuAD v2)");
  return [f] { return Run(*f, /*encode=*/false); };
}

Runner AddEncode(CLI::App& app) {
  auto f = std::make_shared<QaFlags>();
  CLI::App* sub = app.add_subcommand(
      "encode",
      "One forward of exactly the given ids: --input-ids 1,2,3 (or JSON Lines {\"ids\":[...]} on stdin) -> "
      "{\"last_hidden_state\",\"start_logits\",\"end_logits\"} (a classifier: \"logits\")");
  AddModelFlag(sub, *f);
  sub->add_option("--input-ids", f->input_ids,
                  "Comma-separated token ids, run as given (no added tokens; else JSON "
                  "Lines {\"ids\":[...]} on stdin)");
  sub->add_option("--token-type-ids", f->token_type_ids, "Comma-separated token types (RoFormer)");
  sub->add_flag("--json", f->json, "JSON output (the only format)");
  sub->add_flag("--reference", f->reference,
                "Use the reference path (dense, per window; ModernBERT and RoFormer: a decoder trunk's reference "
                "runs in the test suite only)");
  return [f] { return Run(*f, /*encode=*/true); };
}

}  // namespace ropeserve::cli
