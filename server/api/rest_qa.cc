// POST /v1/qa: request parsing and answer formatting around QaService.
#include <nlohmann/json.hpp>

#include "server/api/json_request.h"
#include "server/api/rest_handlers.h"

namespace ropeserve::api {

using json = nlohmann::json;

// POST /v1/qa (docs/api.md): Hugging Face question-answering pipeline
// parameters and defaults, plus `scoring` ("pipeline" or "logits").
StatusOr<RestReply> AnswerQuestions(QaService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(json body, ParseBody(request.body));
  std::string model_name;
  RS_RETURN_IF_ERROR(ReadField(body, "model", model_name));
  if (!model_name.empty() && model_name != service.name())
    return NotFound("model '" + model_name + "' does not exist (QA model: '" + service.name() + "')");
  QaRequest base;
  std::int64_t top_k = 1, max_answer_len = 15, max_seq_len = 384, max_question_len = 64, n_best = 20;
  std::optional<std::int64_t> doc_stride;
  RS_RETURN_IF_ERROR(ReadField(body, "top_k", top_k));
  RS_RETURN_IF_ERROR(ReadField(body, "max_answer_len", max_answer_len));
  RS_RETURN_IF_ERROR(ReadField(body, "max_seq_len", max_seq_len));
  RS_RETURN_IF_ERROR(ReadField(body, "max_question_len", max_question_len));
  RS_RETURN_IF_ERROR(ReadField(body, "n_best_size", n_best));
  if (body.contains("doc_stride") && !body["doc_stride"].is_null()) {
    std::int64_t v = 0;
    RS_RETURN_IF_ERROR(ReadField(body, "doc_stride", v));
    doc_stride = v;
  }
  RS_RETURN_IF_ERROR(ReadField(body, "handle_impossible_answer", base.options.handle_impossible_answer));
  RS_RETURN_IF_ERROR(ReadField(body, "align_to_words", base.options.align_to_words));
  RS_RETURN_IF_ERROR(ReadField(body, "null_score_diff_threshold", base.options.null_score_diff_threshold));
  std::string scoring = "pipeline";
  RS_RETURN_IF_ERROR(ReadField(body, "scoring", scoring));
  if (scoring != "pipeline" && scoring != "logits") return InvalidArgument("'scoring' must be \"pipeline\" or \"logits\"");
  base.options.scoring = scoring == "logits" ? qa::Scoring::kLogits : qa::Scoring::kPipeline;
  if (top_k < 1 || top_k > 100) return InvalidArgument("'top_k' must be between 1 and 100");
  if (max_answer_len < 1 || max_answer_len > 4096) return InvalidArgument("'max_answer_len' must be between 1 and 4096");
  if (max_seq_len < 8 || max_seq_len > (1 << 20)) return InvalidArgument("'max_seq_len' must be between 8 and 1048576");
  if (n_best < 1 || n_best > 1000) return InvalidArgument("'n_best_size' must be between 1 and 1000");
  if (max_question_len < 1 || max_question_len > (1 << 20))
    return InvalidArgument("'max_question_len' must be between 1 and 1048576");
  if (doc_stride && (*doc_stride < 0 || *doc_stride >= max_seq_len))
    return InvalidArgument("'doc_stride' must be between 0 and max_seq_len - 1");
  base.options.top_k = static_cast<int>(top_k);
  base.options.max_answer_len = static_cast<int>(max_answer_len);
  base.options.n_best_size = static_cast<int>(n_best);
  base.windows.max_seq_len = static_cast<int>(max_seq_len);
  base.windows.max_question_len = static_cast<int>(max_question_len);
  if (doc_stride) base.windows.doc_stride = static_cast<int>(*doc_stride);
  // One pair, or a list of pairs sharing the options.
  std::vector<QaRequest> requests;
  auto read_pair = [&](const json& item) -> Status {
    if (!item.is_object()) return MalformedRequest("each input must be an object with 'question' and 'context'");
    QaRequest r = base;
    if (!item.contains("question") || !item["question"].is_string() || !item.contains("context") ||
        !item["context"].is_string())
      return MalformedRequest("'question' and 'context' (strings) are required");
    r.question = item["question"].get<std::string>();
    r.context = item["context"].get<std::string>();
    requests.push_back(std::move(r));
    return Status::Ok();
  };
  const bool batch = body.contains("inputs");
  if (batch) {
    if (!body["inputs"].is_array() || body["inputs"].empty()) return MalformedRequest("'inputs' must be a non-empty list");
    if (body["inputs"].size() > 64) return InvalidArgument("at most 64 inputs per request");
    for (const auto& item : body["inputs"]) RS_RETURN_IF_ERROR(read_pair(item));
  } else {
    RS_RETURN_IF_ERROR(read_pair(body));
  }
  RS_ASSIGN_OR_RETURN(auto results, service.AnswerBatch(requests, request.timeout_seconds));
  auto answers_json = [](const QaResult& r) {
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
