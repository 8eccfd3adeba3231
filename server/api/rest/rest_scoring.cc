// POST /classify and /v1/classify (vLLM's shape), /predict (TEI's), /score
// and /v1/score (vLLM's), /rerank, /v1/rerank and /v2/rerank (vLLM's
// Jina/Cohere shape, or TEI's), /v1/token-classify around
// service::EncoderService; the bodies are read by rest_scoring_request.cc
// (docs/classification.md).
#include <algorithm>

#include "server/api/rest/rest_handlers.h"
#include "server/api/rest/rest_request.h"
#include "server/common/json_text.h"
#include "server/common/unix_time.h"

namespace ropeserve::api {

using json = nlohmann::json;

namespace {

// vLLM's list answer: {"id", "object": "list", "created", "model", "data", "usage"}.
// `extra` adds fields after "model".
std::string ListReply(service::EncoderService& service, const char* id_prefix, json data, std::int64_t tokens,
                      json extra = json::object()) {
  json out = {{"id", service.NextRequestId(id_prefix)},
              {"object", "list"},
              {"created", UnixSeconds()},
              {"model", service.name()}};
  out.update(extra);
  out["data"] = std::move(data);
  out["usage"] = {{"prompt_tokens", tokens}, {"total_tokens", tokens}, {"completion_tokens", 0}};
  return Dump(out);
}

}  // namespace

StatusOr<RestReply> Classify(const std::vector<service::EncoderService*>& encoders, const RestRequest& request,
                             bool tei) {
  RS_ASSIGN_OR_RETURN(ClassifyBody body, ReadClassifyBody(request.body, tei));
  RS_ASSIGN_OR_RETURN(service::EncoderService * service, FindEncoder(encoders, body.model, EncoderTask::kClassify));
  RS_ASSIGN_OR_RETURN(auto results, service->Classify(body.inputs, body.options, request.timeout_seconds,
                                                      request.client_gone, tei ? "inputs" : "input"));
  const std::vector<std::string>& labels = service->config().labels;
  RestReply reply;
  if (tei) {  // per input: [{"score", "label"}, ...] from the best label down
    json all = json::array();
    for (const auto& r : results) {
      json one = json::array();
      for (std::size_t k : service::RankDescending(r.scores))
        one.push_back({{"score", r.scores[k]}, {"label", labels[k]}});
      all.push_back(std::move(one));
    }
    reply.body = Dump(body.tei_batch ? all : all[0]);
    return reply;
  }
  std::int64_t tokens = 0;
  json data = json::array();
  for (std::size_t i = 0; i < results.size(); ++i) {
    tokens += results[i].tokens;
    const std::size_t best = service::RankDescending(results[i].scores, 1)[0];
    data.push_back({{"index", i},
                    {"label", labels[best]},
                    {"probs", results[i].scores},
                    {"num_classes", results[i].scores.size()}});
  }
  reply.body = ListReply(*service, "classify", std::move(data), tokens);
  return reply;
}

StatusOr<RestReply> ClassifyTokens(const std::vector<service::EncoderService*>& encoders, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(TokenClassifyBody body, ReadTokenClassifyBody(request.body));
  RS_ASSIGN_OR_RETURN(service::EncoderService * service,
                      FindEncoder(encoders, body.model, EncoderTask::kTokenClassify));
  RS_ASSIGN_OR_RETURN(auto results, service->ClassifyTokens(body.inputs, body.options, request.timeout_seconds,
                                                            request.client_gone, "input"));
  const bool grouped = body.options.aggregation != qa::Aggregation::kNone;
  std::int64_t tokens = 0;
  json data = json::array();
  for (std::size_t i = 0; i < results.size(); ++i) {
    tokens += results[i].tokens;
    json entities = json::array();
    const qa::OffsetMap offsets(body.inputs[i].text, body.offset_unit);
    for (const qa::Entity& e : results[i].entities) {
      // transformers' keys: "entity" and "index" per token, "entity_group" grouped.
      json one = {{grouped ? "entity_group" : "entity", e.label}, {"score", e.score}};
      if (!grouped) one["index"] = e.index;
      const auto [start, end] = offsets(e.start, e.end);
      one.update({{"word", e.word}, {"start", start}, {"end", end}});
      entities.push_back(std::move(one));
    }
    data.push_back({{"index", i}, {"object", "token_classification"}, {"entities", std::move(entities)}});
  }
  RestReply reply;
  reply.body = ListReply(*service, "tokcls", std::move(data), tokens,
                         {{"aggregation_strategy", qa::AggregationName(body.options.aggregation)},
                          {"offset_unit", qa::OffsetUnitName(body.offset_unit)}});
  return reply;
}

StatusOr<RestReply> ScoreDocuments(const std::vector<service::EncoderService*>& encoders, const RestRequest& request,
                                   bool rerank) {
  RS_ASSIGN_OR_RETURN(ScoreBody body, ReadScoreBody(request.body, rerank));
  RS_ASSIGN_OR_RETURN(service::EncoderService * service, FindEncoder(encoders, body.model, EncoderTask::kScore));
  const bool tei = body.shape == ScoreBody::Shape::kTeiRerank;
  service::EncoderService::ScorePairs pairs;
  pairs.queries = body.queries;
  pairs.documents = body.documents;
  pairs.query_param = rerank ? "query" : "text_1";
  pairs.param = !rerank ? "text_2" : tei ? "texts" : "documents";
  RS_ASSIGN_OR_RETURN(auto results, service->Score(pairs, body.options, request.timeout_seconds, request.client_gone));
  std::int64_t tokens = 0;
  std::vector<double> scores;
  for (const auto& r : results) {
    tokens += r.tokens;
    scores.push_back(r.score);
  }
  RestReply reply;
  if (body.shape == ScoreBody::Shape::kScore) {
    json data = json::array();
    for (std::size_t i = 0; i < results.size(); ++i)
      data.push_back({{"index", i}, {"object", "score"}, {"score", results[i].score}});
    reply.body = ListReply(*service, "score", std::move(data), tokens);
    return reply;
  }
  // TEI's shape has no top_n (0: every text).
  const std::vector<std::size_t> order = service::RankByScore(results, static_cast<std::size_t>(body.top_n));
  if (tei) {  // [{"index", "score", "text"?}, ...] from the best down
    json out = json::array();
    for (std::size_t i : order) {
      json item = {{"index", i}, {"score", scores[i]}};
      if (body.return_documents) item["text"] = body.documents[i];
      out.push_back(std::move(item));
    }
    reply.body = Dump(out);
    return reply;
  }
  json list = json::array();
  for (std::size_t i : order) {
    json item = {{"index", i}, {"relevance_score", scores[i]}};
    if (body.return_documents) item["document"] = {{"text", body.documents[i]}};
    list.push_back(std::move(item));
  }
  json out = {{"id", service->NextRequestId("rerank")},
              {"model", service->name()},
              {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}},
              {"results", std::move(list)}};
  reply.body = Dump(out);
  return reply;
}

}  // namespace ropeserve::api
