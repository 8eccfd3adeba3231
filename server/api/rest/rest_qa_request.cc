// Reading /v1/qa bodies (docs/api.md): ropeserve's shapes and the Hugging
// Face question-answering pipeline's. Model-free (the fuzz target links it).
#include "server/api/rest/json_fields.h"
#include "server/api/rest/rest_request.h"

namespace ropeserve::api {

namespace {

constexpr Rule kQaOptionRules[] = {
    {"top_k", Kind::kRead},
    {"max_answer_len", Kind::kRead},
    {"max_seq_len", Kind::kRead},
    {"max_question_len", Kind::kRead},
    {"doc_stride", Kind::kRead},
    {"n_best_size", Kind::kRead},
    {"handle_impossible_answer", Kind::kRead},
    {"align_to_words", Kind::kRead},
    {"null_score_diff_threshold", Kind::kRead},
    {"scoring", Kind::kRead},
    {"offset_unit", Kind::kRead},
};
constexpr Rule kQaRules[] = {
    {"model", Kind::kRead},  {"question", Kind::kRead},   {"context", Kind::kRead},  {"contexts", Kind::kRead},
    {"inputs", Kind::kRead}, {"parameters", Kind::kRead}, {"retrieve", Kind::kRead},
};

// "retrieve": {"top_k": N, "model": "name"}; every question must have
// passages ("contexts") to choose from.
Status ReadRetrieve(const ojson& body, QaBody& out) {
  if (!body.contains("retrieve") || body["retrieve"].is_null()) return Status::Ok();
  const ojson& r = body["retrieve"];
  if (!r.is_object()) return Malformed("retrieve", "'retrieve' must be an object {\"top_k\", \"model\"}");
  for (const auto& [key, value] : r.items())
    if (key != "top_k" && key != "model")
      return Malformed("retrieve." + key.substr(0, 100), "unrecognized field: '" + key.substr(0, 100) + "'");
  QaRetrieve q;
  auto reader = BodyReader(r, "retrieve");
  RS_RETURN_IF_ERROR(reader.ReadInto("model", q.model));
  RS_RETURN_IF_ERROR(reader.ReadInto("top_k", q.top_k));
  if (q.top_k < 1 || q.top_k > service::kMaxQaPassages)
    return Malformed("retrieve.top_k", "'top_k' must be between 1 and " + std::to_string(service::kMaxQaPassages));
  for (std::size_t i = 0; i < out.inputs.size(); ++i)
    if (!out.inputs[i].multi)
      return Malformed(out.batch ? "inputs[" + std::to_string(i) + "].contexts" : "contexts",
                       "'retrieve' chooses among passages: give 'contexts' (a list of passages)");
  out.retrieve = q;
  return Status::Ok();
}

Status ReadQaOptions(const ojson& o, service::QaFields& f) {
  for (auto [k, v] : {std::pair{"top_k", &f.top_k}, std::pair{"max_answer_len", &f.max_answer_len},
                      std::pair{"max_seq_len", &f.max_seq_len}, std::pair{"max_question_len", &f.max_question_len},
                      std::pair{"doc_stride", &f.doc_stride}, std::pair{"n_best_size", &f.n_best_size}})
    RS_RETURN_IF_ERROR(Read(o, k, *v));
  RS_RETURN_IF_ERROR(Read(o, "handle_impossible_answer", f.handle_impossible_answer));
  RS_RETURN_IF_ERROR(Read(o, "align_to_words", f.align_to_words));
  RS_RETURN_IF_ERROR(Read(o, "null_score_diff_threshold", f.null_score_diff_threshold));
  RS_RETURN_IF_ERROR(Read(o, "scoring", f.scoring));
  RS_RETURN_IF_ERROR(Read(o, "offset_unit", f.offset_unit));
  return Status::Ok();
}

// "contexts": a non-empty list of strings or {"id", "text"} objects.
Status ReadPassages(const ojson& list, const std::string& where, std::vector<service::QaPassage>& out) {
  if (!list.is_array() || list.empty())
    return Malformed(where, "'contexts' must be a non-empty list of strings or {\"id\", \"text\"} objects");
  if (list.size() > static_cast<std::size_t>(service::kMaxQaPassages))
    return InvalidArgument("at most " + std::to_string(service::kMaxQaPassages) + " passages per question")
        .WithParam(where);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const ojson& p = list[i];
    service::QaPassage passage;
    if (p.is_string()) {
      passage.text = p.get<std::string>();
    } else if (p.is_object()) {
      for (auto it = p.begin(); it != p.end(); ++it)
        if (it.key() != "id" && it.key() != "text")
          return Malformed(at + "." + it.key().substr(0, 100), "a passage has only 'id' and 'text'");
      if (!p.contains("text") || !p["text"].is_string())
        return Malformed(at + ".text", "'text' (a string) is required");
      passage.text = p["text"].get<std::string>();
      if (p.contains("id") && !p["id"].is_null()) {
        if (!p["id"].is_string() && !p["id"].is_number_integer())
          return Malformed(at + ".id", "a passage 'id' is a string or an integer");
        passage.id = p["id"].is_string() ? p["id"].get<std::string>() : p["id"].dump();
        passage.id_is_number = !p["id"].is_string();
      }
    } else {
      return Malformed(at, "a passage is a string or an object {\"id\", \"text\"}");
    }
    out.push_back(std::move(passage));
  }
  return Status::Ok();
}

// {"question", "context"} or {"question", "contexts"}.
Status ReadInput(const ojson& item, const std::string& where, QaBody& out) {
  auto name = [&](const char* key) { return where.empty() ? std::string(key) : where + "." + key; };
  if (!item.is_object()) return Malformed(where, "each input must be an object with 'question' and 'context'");
  if (!item.contains("question") || !item["question"].is_string())
    return Malformed(name("question"), "'question' (a string) is required");
  QaInput in;
  in.question = item["question"].get<std::string>();
  const bool has_context = item.contains("context"), has_contexts = item.contains("contexts");
  if (has_context == has_contexts)
    return Malformed(name("context"), "give 'context' (a string) or 'contexts' (a list of passages), one of them");
  if (has_contexts) {
    in.multi = true;
    RS_RETURN_IF_ERROR(ReadPassages(item["contexts"], name("contexts"), in.passages));
  } else {
    if (!item["context"].is_string()) return Malformed(name("context"), "'context' must be a string");
    in.context = item["context"].get<std::string>();
  }
  out.inputs.push_back(std::move(in));
  return Status::Ok();
}

}  // namespace

StatusOr<QaBody> ReadQaBody(const std::string& text) {
  RS_ASSIGN_OR_RETURN(ojson body, ParseJsonObject(text));
  RS_RETURN_IF_ERROR(CheckFields(body, kQaRules, kQaOptionRules));
  QaBody out;
  RS_RETURN_IF_ERROR(ReadInto(body, "model", out.model));
  RS_RETURN_IF_ERROR(ReadQaOptions(body, out.fields));
  // The pipeline's "parameters" (its values win over top-level ones).
  if (body.contains("parameters") && !body["parameters"].is_null()) {
    const ojson& params = body["parameters"];
    if (!params.is_object()) return Malformed("parameters", "'parameters' must be an object");
    if (Status s = CheckFields(params, kQaOptionRules); !s.ok()) return s.WithParam("parameters." + s.param());
    RS_RETURN_IF_ERROR(ReadQaOptions(params, out.fields));
  }
  if (!body.contains("inputs")) {
    if (body.contains("parameters")) return Malformed("inputs", "'parameters' goes with 'inputs'");
    RS_RETURN_IF_ERROR(ReadInput(body, "", out));
    RS_RETURN_IF_ERROR(ReadRetrieve(body, out));
    return out;
  }
  if (body.contains("question") || body.contains("context") || body.contains("contexts"))
    return Malformed("inputs", "give either 'inputs' or 'question' and 'context', not both");
  const ojson& inputs = body["inputs"];
  if (inputs.is_object()) {  // the pipeline's single input
    RS_RETURN_IF_ERROR(ReadInput(inputs, "inputs", out));
    RS_RETURN_IF_ERROR(ReadRetrieve(body, out));
    return out;
  }
  out.batch = true;
  if (!inputs.is_array() || inputs.empty()) return Malformed("inputs", "'inputs' must be a non-empty list");
  if (inputs.size() > static_cast<std::size_t>(service::kMaxQaInputs))
    return InvalidArgument("at most " + std::to_string(service::kMaxQaInputs) + " inputs per request")
        .WithParam("inputs");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    RS_RETURN_IF_ERROR(ReadInput(inputs[i], "inputs[" + std::to_string(i) + "]", out));
  RS_RETURN_IF_ERROR(ReadRetrieve(body, out));
  return out;
}

}  // namespace ropeserve::api
