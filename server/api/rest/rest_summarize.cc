// POST /v1/summarize (docs/api.md): one pass for a text that fits the
// context, map-reduce / refine / truncate for longer documents
// (server/service/document_summary.h). Greedy by default.
#include <nlohmann/json.hpp>

#include "server/api/http/event_stream.h"
#include "server/api/rest/rest_handlers.h"
#include "server/api/rest/rest_request.h"
#include "server/common/json_text.h"
#include "server/service/document_summary.h"

namespace ropeserve::api {

using json = nlohmann::json;

namespace {

json SummaryUsage(const service::OutputDelta& last, std::int64_t chunks) {
  json u = {{"prompt_tokens", last.prompt_tokens},
            {"completion_tokens", last.completion_tokens},
            {"total_tokens", last.prompt_tokens + last.completion_tokens},
            {"cached_tokens", last.cached_tokens}};
  if (chunks > 1) u["chunks"] = chunks;
  return u;
}

}  // namespace

StatusOr<RestReply> Summarize(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(SummarizeBody body, ReadSummarizeBody(request.body));
  body.fields.server_priority = request.priority;
  if (request.user != nullptr) *request.user = body.user;
  RS_RETURN_IF_ERROR(service.CheckModelName(body.model));
  service::DocumentSummarizer summarizer(service);
  RS_ASSIGN_OR_RETURN(service::SummaryPlan plan, summarizer.Plan(body.summary, body.fields));
  RS_ASSIGN_OR_RETURN(auto source, summarizer.Start(plan, body.fields, request.timeout_seconds,
                                                    service::GenerationService::Admission::kWait, request.trace));
  const std::string id = service.NextRequestId("sum");
  const auto chunks = static_cast<std::int64_t>(plan.chunks.size());
  const std::string strategy = service::StrategyName(plan);
  RestReply reply;
  if (body.stream) {
    auto on_delta = [&service, id, chunks, strategy](std::size_t, const service::OutputDelta& d, std::string& out) {
      if (d.progress) {
        out += Event({{"id", id},
                      {"event", "progress"},
                      {"phase", d.progress->phase},
                      {"chunks_done", d.progress->done},
                      {"chunks_total", d.progress->total}});
        return;
      }
      if (!d.text.empty()) out += Event({{"id", id}, {"delta", d.text}});
      if (d.finished) {
        out += Event({{"id", id},
                      {"model", service.name()},
                      {"finish_reason", d.finish_reason},
                      {"strategy", strategy},
                      {"usage", SummaryUsage(d, chunks)}});
      }
    };
    std::vector<std::unique_ptr<service::OutputSource>> sources;
    sources.push_back(std::move(source));
    auto events = std::make_unique<GenerationStream>(std::move(sources), on_delta, [](std::string&) {});
    if (chunks > 1) events->SetHeartbeat(std::chrono::seconds(1));
    reply.events = std::move(events);
    return reply;
  }
  service::OutputDelta last;
  RS_ASSIGN_OR_RETURN(GenerateResult r, service::OutputSource::Collect(*source, request.client_gone, &last));
  reply.body = Dump({{"id", id},
                     {"model", service.name()},
                     {"summary", r.text},
                     {"finish_reason", r.finish_reason},
                     {"strategy", strategy},
                     {"usage", SummaryUsage(last, chunks)}});
  return reply;
}

}  // namespace ropeserve::api
