// POST /v1/qa: answer formatting around service::QaService (the body is
// read by rest_qa_request.cc).
#include <nlohmann/json.hpp>

#include "server/api/json_request.h"
#include "server/api/rest_handlers.h"
#include "server/api/rest_request.h"

namespace ropeserve::api {

using json = nlohmann::json;

namespace {

const char* UnitName(qa::OffsetUnit u) {
  switch (u) {
    case qa::OffsetUnit::kUtf16:
      return "utf16";
    case qa::OffsetUnit::kUtf8Byte:
      return "utf8_byte";
    case qa::OffsetUnit::kCodePoint:
      break;
  }
  return "code_point";
}

// One answer: `answer` (the pipeline's name) and `text` (its deprecated
// alias, kept until 2027-06), offsets (already in the asked unit), the
// passage for multi-passage questions.
json AnswerJson(const qa::Answer& a, const QaInput& in) {
  json out = {{"answer", a.text}, {"text", a.text}, {"score", a.score}, {"start", a.start}, {"end", a.end}};
  if (in.multi) {
    const bool in_passage = a.passage >= 0 && a.passage < static_cast<std::int64_t>(in.passages.size());
    out["passage"] = in_passage ? json(a.passage) : json(nullptr);
    const service::QaPassage* p = in_passage ? &in.passages[static_cast<std::size_t>(a.passage)] : nullptr;
    if (p != nullptr && p->id)
      out["passage_id"] = p->id_is_number ? json::parse(*p->id) : json(*p->id);
    else if (in_passage)
      out["passage_id"] = nullptr;
  }
  return out;
}

}  // namespace

// POST /v1/qa (docs/api.md): Hugging Face question-answering pipeline
// parameters and defaults, plus `scoring` ("pipeline" or "logits"),
// multi-passage questions (`contexts`) and `offset_unit`.
StatusOr<RestReply> AnswerQuestions(service::QaService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(QaBody body, ReadQaBody(request.body));
  if (!body.model.empty() && body.model != service.name())
    return NotFound("model '" + body.model + "' does not exist (QA model: '" + service.name() + "')")
        .WithParam("model")
        .WithReason("model_not_found");
  RS_ASSIGN_OR_RETURN(service::ValidatedQa v,
                      service::ValidateQa(body.fields, service.config().max_position_embeddings));
  std::vector<service::QaRequest> requests;
  for (const QaInput& in : body.inputs) {
    service::QaRequest r;
    r.question = in.question;
    r.context = in.context;
    for (const auto& p : in.passages) r.passages.push_back(p.text);
    r.windows = v.windows;
    r.options = v.options;
    r.offset_unit = v.offset_unit;
    requests.push_back(std::move(r));
  }
  RS_ASSIGN_OR_RETURN(auto results, service.AnswerBatch(requests, request.timeout_seconds, request.client_gone));
  auto result_json = [&](std::size_t k, json& into) {
    json a = json::array();
    for (const auto& x : results[k].answers) a.push_back(AnswerJson(x, body.inputs[k]));
    into["answers"] = std::move(a);
    if (results[k].null_score) into["null_score"] = *results[k].null_score;
  };
  std::int64_t tokens = 0, windows = 0;
  for (const auto& r : results) {
    tokens += r.tokens;
    windows += r.windows;
  }
  json out = {{"id", service.NextRequestId()}, {"model", service.name()}};
  if (body.batch) {
    json list = json::array();
    for (std::size_t k = 0; k < results.size(); ++k) {
      json item = json::object();
      result_json(k, item);
      list.push_back(std::move(item));
    }
    out["results"] = list;
  } else {
    result_json(0, out);
  }
  out["offset_unit"] = UnitName(v.offset_unit);
  out["usage"] = {{"prompt_tokens", tokens}, {"windows", windows}};
  RestReply reply;
  reply.body = Dump(out);
  return reply;
}

}  // namespace ropeserve::api
