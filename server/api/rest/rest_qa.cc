// POST /v1/qa: answer formatting around service::QaService (the body is
// read by rest_qa_request.cc).
#include <nlohmann/json.hpp>

#include <algorithm>

#include "server/api/rest/rest_handlers.h"
#include "server/api/rest/rest_request.h"
#include "server/common/json_text.h"

namespace ropeserve::api {

using json = nlohmann::json;

namespace {

// One answer: `answer` (the pipeline's name) and `text` (its deprecated
// alias, kept until 2027-06), offsets (already in the asked unit), the
// passage for multi-passage questions.
json PassageId(const service::QaPassage& p) {
  if (!p.id) return nullptr;
  return p.id_is_number ? json::parse(*p.id) : json(*p.id);
}

// A question's passages after retrieval: the original indices of those
// read (best first) and their retrieval scores.
struct Retrieved {
  std::vector<std::size_t> kept;
  std::vector<double> scores;
};

// `retrieved` (when set) maps an answer's passage (an index into the kept
// passages) back to the request's, and adds its retrieval score.
json AnswerJson(const qa::Answer& a, const QaInput& in, const std::optional<Retrieved>& retrieved) {
  json out = {{"answer", a.text}, {"text", a.text}, {"score", a.score}, {"start", a.start}, {"end", a.end}};
  if (in.multi) {
    const std::size_t n = retrieved ? retrieved->kept.size() : in.passages.size();
    const bool in_passage = a.passage >= 0 && a.passage < static_cast<std::int64_t>(n);
    const auto local = static_cast<std::size_t>(a.passage);
    const std::size_t index = in_passage && retrieved ? retrieved->kept[local] : local;
    out["passage"] = in_passage ? json(index) : json(nullptr);
    if (in_passage) out["passage_id"] = PassageId(in.passages[index]);
    if (retrieved) out["retrieval_score"] = in_passage ? json(retrieved->scores[local]) : json(nullptr);
  }
  return out;
}

// Ranks each question's passages with `scorer` and keeps the best top_k.
StatusOr<std::vector<Retrieved>> Retrieve(service::EncoderService& scorer, const QaBody& body,
                                          const RestRequest& request, std::int64_t& tokens) {
  std::vector<Retrieved> out;
  for (std::size_t k = 0; k < body.inputs.size(); ++k) {
    const QaInput& in = body.inputs[k];
    service::EncoderService::ScorePairs pairs;
    pairs.queries = {in.question};
    for (const auto& p : in.passages) pairs.documents.push_back(p.text);
    const std::string at = body.batch ? "inputs[" + std::to_string(k) + "]." : "";
    pairs.query_param = at + "question";
    pairs.param = at + "contexts";
    // Retrieval needs a score, not every token: passages longer than the
    // encoder's limit are cut for it (the QA model still reads them whole).
    service::ScoreOptions options;
    options.truncate = true;
    RS_ASSIGN_OR_RETURN(auto scores, scorer.Score(pairs, options, request.timeout_seconds, request.client_gone));
    Retrieved r;
    for (const service::ScoreResult& s : scores) tokens += s.tokens;
    for (std::size_t i : service::RankByScore(scores, static_cast<std::size_t>(body.retrieve->top_k))) {
      r.kept.push_back(i);
      r.scores.push_back(scores[i].score);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

// POST /v1/qa (docs/api.md): Hugging Face question-answering pipeline
// parameters and defaults, plus `scoring` ("pipeline" or "logits"),
// multi-passage questions (`contexts`), `retrieve` (the passages ranked by
// an encoder first, only the best read) and `offset_unit`.
StatusOr<RestReply> AnswerQuestions(service::QaService& service, const RestRequest& request,
                                    const std::vector<service::EncoderService*>& encoders) {
  RS_ASSIGN_OR_RETURN(QaBody body, ReadQaBody(request.body));
  if (!body.model.empty() && body.model != service.name())
    return NotFound("model '" + body.model + "' does not exist (QA model: '" + service.name() + "')")
        .WithParam("model")
        .WithReason("model_not_found");
  RS_ASSIGN_OR_RETURN(service::ValidatedQa v,
                      service::ValidateQa(body.fields, service.config().max_position_embeddings));
  std::vector<Retrieved> retrieved;
  std::int64_t retrieval_tokens = 0;
  service::EncoderService* scorer = nullptr;
  if (body.retrieve) {
    auto found = FindEncoder(encoders, body.retrieve->model, EncoderTask::kScore);
    if (!found.ok()) {
      const Status failed = found.status();
      return failed.param() == "model" ? Status(failed.code(), failed.message()).WithParam("retrieve.model") : failed;
    }
    scorer = *found;
    RS_ASSIGN_OR_RETURN(retrieved, Retrieve(*scorer, body, request, retrieval_tokens));
  }
  auto retrieval = [&](std::size_t k) {
    return retrieved.empty() ? std::optional<Retrieved>() : std::optional<Retrieved>(retrieved[k]);
  };
  std::vector<service::QaRequest> requests;
  for (std::size_t k = 0; k < body.inputs.size(); ++k) {
    const QaInput& in = body.inputs[k];
    service::QaRequest r;
    r.question = in.question;
    r.context = in.context;
    if (retrieved.empty()) {
      for (const auto& p : in.passages) r.passages.push_back(p.text);
    } else {
      for (std::size_t i : retrieved[k].kept) r.passages.push_back(in.passages[i].text);
    }
    r.windows = v.windows;
    r.options = v.options;
    r.offset_unit = v.offset_unit;
    requests.push_back(std::move(r));
  }
  RS_ASSIGN_OR_RETURN(auto results, service.AnswerBatch(requests, request.timeout_seconds, request.client_gone));
  auto result_json = [&](std::size_t k, json& into) {
    json a = json::array();
    const std::optional<Retrieved> r = retrieval(k);
    for (const auto& x : results[k].answers) a.push_back(AnswerJson(x, body.inputs[k], r));
    into["answers"] = std::move(a);
    if (results[k].null_score) into["null_score"] = *results[k].null_score;
    if (r) {  // the passages read, best first
      json passages = json::array();
      for (std::size_t i = 0; i < r->kept.size(); ++i)
        passages.push_back({{"passage", r->kept[i]},
                            {"passage_id", PassageId(body.inputs[k].passages[r->kept[i]])},
                            {"score", r->scores[i]}});
      into["retrieved"] = std::move(passages);
    }
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
  out["offset_unit"] = qa::OffsetUnitName(v.offset_unit);
  out["usage"] = {{"prompt_tokens", tokens}, {"windows", windows}};
  if (scorer != nullptr) {
    out["retrieval_model"] = scorer->name();
    out["usage"]["retrieval_tokens"] = retrieval_tokens;
  }
  RestReply reply;
  reply.body = Dump(out);
  return reply;
}

}  // namespace ropeserve::api
