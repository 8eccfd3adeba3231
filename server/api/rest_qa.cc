// POST /v1/qa: request parsing and answer formatting around service::QaService.
#include <nlohmann/json.hpp>

#include "server/api/json_request.h"
#include "server/api/rest_request.h"
#include "server/api/rest_handlers.h"

namespace ropeserve::api {

using json = nlohmann::json;

// POST /v1/qa (docs/api.md): Hugging Face question-answering pipeline
// parameters and defaults, plus `scoring` ("pipeline" or "logits").
StatusOr<RestReply> AnswerQuestions(service::QaService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(QaBody body, ReadQaBody(request.body));
  if (!body.model.empty() && body.model != service.name())
    return NotFound("model '" + body.model + "' does not exist (QA model: '" + service.name() + "')").WithParam("model").WithReason("model_not_found");
  RS_ASSIGN_OR_RETURN(service::ValidatedQa v, service::ValidateQa(body.fields, service.config().max_position_embeddings));
  std::vector<service::QaRequest> requests;
  for (auto& [question, context] : body.inputs) {
    service::QaRequest r;
    r.question = std::move(question);
    r.context = std::move(context);
    r.windows = v.windows;
    r.options = v.options;
    requests.push_back(std::move(r));
  }
  const bool batch = body.batch;
  RS_ASSIGN_OR_RETURN(auto results, service.AnswerBatch(requests, request.timeout_seconds, request.client_gone));
  auto answers_json = [](const service::QaResult& r) {
    json a = json::array();
    for (const auto& x : r.answers) a.push_back({{"text", x.text}, {"score", x.score}, {"start", x.start}, {"end", x.end}});
    return a;
  };
  std::int64_t tokens = 0, windows = 0;
  for (const auto& r : results) {
    tokens += r.tokens;
    windows += r.windows;
  }
  json out = {{"id", service.NextRequestId()}, {"model", service.name()}};
  if (batch) {
    json list = json::array();
    for (const auto& r : results) list.push_back({{"answers", answers_json(r)}});
    out["results"] = list;
  } else {
    out["answers"] = answers_json(results[0]);
  }
  out["usage"] = {{"prompt_tokens", tokens}, {"windows", windows}};
  RestReply reply;
  reply.body = Dump(out);
  return reply;
}

}  // namespace ropeserve::api
