// OpenAI's Batch API over the data directory's store (server/batch/
// batch_store.h): POST /v1/batches, GET /v1/batches, GET /v1/batches/{id},
// POST /v1/batches/{id}/cancel; and the executor that runs a batch's lines
// through the same handlers online requests go through
// (server/batch/batch_runner.h).
#include <nlohmann/json.hpp>

#include <string>

#include "server/api/error_mapping.h"
#include "server/api/rest/batch_executor.h"
#include "server/api/rest/rest_handlers.h"
#include "server/api/rest/rest_request.h"
#include "server/batch/batch_store.h"
#include "server/common/json_text.h"
#include "server/service/generation_service.h"

namespace ropeserve::api {

namespace {

using json = nlohmann::ordered_json;

json TimeOrNull(std::int64_t t) { return t > 0 ? json(t) : json(nullptr); }

json BatchObject(const batch::BatchInfo& b, const std::string& model) {
  json errors = b.errors.empty() ? json(nullptr) : json::parse(b.errors, nullptr, false);
  json metadata = b.metadata.empty() ? json(nullptr) : json::parse(b.metadata, nullptr, false);
  json o = {{"id", b.id},
            {"object", "batch"},
            {"endpoint", b.endpoint},
            {"model", model.empty() ? json(nullptr) : json(model)},
            {"errors", errors.is_discarded() ? json(nullptr) : errors},
            {"input_file_id", b.input_file_id},
            {"completion_window", b.completion_window},
            {"status", b.status},
            {"output_file_id", b.output_file_id.empty() ? json(nullptr) : json(b.output_file_id)},
            {"error_file_id", b.error_file_id.empty() ? json(nullptr) : json(b.error_file_id)},
            {"created_at", b.created_at},
            {"in_progress_at", TimeOrNull(b.in_progress_at)},
            {"expires_at", TimeOrNull(b.expires_at)},
            {"finalizing_at", TimeOrNull(b.finalizing_at)},
            {"completed_at", TimeOrNull(b.completed_at)},
            {"failed_at", TimeOrNull(b.failed_at)},
            {"expired_at", TimeOrNull(b.expired_at)},
            {"cancelling_at", TimeOrNull(b.cancelling_at)},
            {"cancelled_at", TimeOrNull(b.cancelled_at)},
            {"request_counts", {{"total", b.total}, {"completed", b.completed}, {"failed", b.failed}}},
            {"metadata", metadata.is_discarded() ? json(nullptr) : metadata}};
  return o;
}

StatusOr<batch::BatchStore*> Batches(const RestRequest& request) {
  if (request.batches == nullptr)
    return FailedPrecondition("the Batch API needs a data directory: start the server with --data-dir DIR");
  return request.batches;
}

// OpenAI's metadata: at most 16 pairs, keys up to 64 characters, string
// values up to 512.
StatusOr<std::string> ReadMetadata(const json& m) {
  if (m.is_null()) return std::string();
  if (!m.is_object()) return Malformed("metadata", "'metadata' must be an object of strings");
  if (m.size() > 16) return Malformed("metadata", "'metadata' may hold at most 16 pairs");
  for (const auto& [key, value] : m.items()) {
    if (key.size() > 64) return Malformed("metadata", "'metadata' keys may be at most 64 characters");
    if (!value.is_string()) return Malformed("metadata", "'metadata' values must be strings");
    if (value.get<std::string>().size() > 512)
      return Malformed("metadata", "'metadata' values may be at most 512 characters");
  }
  return DumpOrdered(m);
}

StatusOr<std::int64_t> ReadOutputExpiry(const json& e) {
  if (!e.is_object()) return Malformed("output_expires_after", "'output_expires_after' must be an object");
  for (const auto& [key, value] : e.items())
    if (key != "anchor" && key != "seconds")
      return Malformed("output_expires_after." + key.substr(0, 64), "unknown field '" + key.substr(0, 64) + "'");
  auto anchor = e.find("anchor");
  if (anchor == e.end() || *anchor != "created_at")
    return Malformed("output_expires_after.anchor", "'output_expires_after.anchor' must be created_at");
  auto seconds = e.find("seconds");
  if (seconds == e.end() || !seconds->is_number_integer() || *seconds < 3600 || *seconds > 2592000)
    return Malformed("output_expires_after.seconds",
                     "'output_expires_after.seconds' must be an integer from 3600 to 2592000");
  return seconds->get<std::int64_t>();
}

}  // namespace

StatusOr<RestReply> CreateBatch(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(batch::BatchStore * batches, Batches(request));
  RS_ASSIGN_OR_RETURN(json body, ParseJsonObject(request.body));
  std::string input_file_id, endpoint, window, metadata;
  std::int64_t output_expires_after = 0;
  for (const auto& [key, value] : body.items()) {
    if (key == "input_file_id" || key == "endpoint" || key == "completion_window") {
      if (!value.is_string()) return Malformed(key, "'" + key + "' must be a string");
      (key == "input_file_id" ? input_file_id : key == "endpoint" ? endpoint : window) = value.get<std::string>();
    } else if (key == "metadata") {
      RS_ASSIGN_OR_RETURN(metadata, ReadMetadata(value));
    } else if (key == "output_expires_after") {
      RS_ASSIGN_OR_RETURN(output_expires_after, ReadOutputExpiry(value));
    } else {
      return Malformed(key.substr(0, 100), "unknown field '" + key.substr(0, 100) + "'");
    }
  }
  if (input_file_id.empty()) return Malformed("input_file_id", "'input_file_id' is required");
  bool known = false;
  std::string endpoints;
  for (const char* e : batch::kBatchEndpoints) {
    known = known || endpoint == e;
    endpoints += (endpoints.empty() ? "" : ", ") + std::string(e);
  }
  if (!known) return Malformed("endpoint", "'endpoint' must be one of " + endpoints);
  if (window != "24h") return Malformed("completion_window", "'completion_window' must be 24h");
  RS_ASSIGN_OR_RETURN(batch::BatchInfo b,
                      batches->Create(request.owner, input_file_id, endpoint, metadata, output_expires_after));
  return JsonReply(BatchObject(b, service.name()));
}

StatusOr<RestReply> RetrieveBatch(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(batch::BatchStore * batches, Batches(request));
  RS_ASSIGN_OR_RETURN(batch::BatchInfo b, batches->Get(request.path_id, request.owner));
  return JsonReply(BatchObject(b, service.name()));
}

StatusOr<RestReply> ListBatches(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(batch::BatchStore * batches, Batches(request));
  std::string after;
  std::size_t limit = 20;
  for (const auto& [key, value] : request.query) {
    if (key == "after") {
      after = value;
    } else if (key == "limit") {
      RS_ASSIGN_OR_RETURN(std::int64_t n, IntegerParam("limit", value, 1, 100));
      limit = static_cast<std::size_t>(n);
    } else {
      return Malformed(key.substr(0, 100), "unknown query parameter '" + key.substr(0, 100) + "'");
    }
  }
  RS_ASSIGN_OR_RETURN(batch::BatchStore::Page page, batches->List(request.owner, after, limit));
  json data = json::array();
  for (const auto& b : page.batches) data.push_back(BatchObject(b, service.name()));
  return ListReply(std::move(data), page.has_more);
}

StatusOr<RestReply> CancelBatch(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(batch::BatchStore * batches, Batches(request));
  RS_ASSIGN_OR_RETURN(batch::BatchInfo b, batches->Cancel(request.path_id, request.owner));
  return JsonReply(BatchObject(b, service.name()));
}

namespace {

// The running line's cancel flag: RestRequest::client_gone is a plain
// function, so the flag reaches it through the worker thread.
thread_local const std::atomic<bool>* t_line_cancelled = nullptr;
bool LineCancelled() { return t_line_cancelled != nullptr && t_line_cancelled->load(); }

using Handler = StatusOr<RestReply> (*)(service::GenerationService&, const RestRequest&);

Handler HandlerFor(const std::string& endpoint) {
  if (endpoint == "/v1/chat/completions") return &ChatCompletions;
  if (endpoint == "/v1/completions") return &Completions;
  if (endpoint == "/v1/responses") return &CreateResponse;
  if (endpoint == "/v1/summarize") return &Summarize;
  return nullptr;
}

}  // namespace

batch::LineExecutor BatchLineExecutor(ServingContext& ctx) {
  return [&ctx](const batch::LineRequest& line, const std::atomic<bool>& cancelled) {
    batch::LineOutcome out;
    t_line_cancelled = &cancelled;
    struct Clear {
      ~Clear() { t_line_cancelled = nullptr; }
    } clear;
    service::GenerationService* service = ctx.service.load();
    if (service == nullptr) {
      out.retry = true;  // the model is loading, or the server stops
      return out;
    }
    RestRequest request{line.body};
    request.client_gone = &LineCancelled;
    request.responses = ctx.responses.get();
    request.owner = line.owner;
    request.priority = service::kBatchPriority;
    StatusOr<RestReply> reply = Unavailable("no handler");
    if (line.endpoint == "/v1/qa") {
      service::QaService* qa = ctx.qa.load();
      const std::vector<service::EncoderService*>* encoders = ctx.encoders.load();
      reply = qa != nullptr ? AnswerQuestions(*qa, request,
                                              encoders == nullptr ? std::vector<service::EncoderService*>() : *encoders)
                            : StatusOr<RestReply>(Unimplemented("no QA model is loaded (serve --qa DIR)"));
    } else if (Handler h = HandlerFor(line.endpoint)) {
      reply = h(*service, request);
    } else {
      reply = InvalidArgument("unsupported batch endpoint " + line.endpoint);
    }
    if (cancelled.load()) {
      out.retry = true;
      return out;
    }
    if (!reply.ok()) {
      out.status_code = HttpStatusFor(reply.status().code());
      // Overload, or the engine going away: not this line's fault.
      out.retry = out.status_code == 429 || out.status_code == 503;
      out.body = ErrorJson(reply.status());
    } else if (reply->events) {
      out.status_code = 400;
      out.body = ErrorJson(MalformedRequest("a batch request cannot be streamed"));
    } else {
      out.body = std::move(reply->body);
    }
    if (ctx.metrics != nullptr && !out.retry)
      ctx.metrics->CountRequest(line.endpoint, "batch", std::to_string(out.status_code));
    return out;
  };
}

}  // namespace ropeserve::api
