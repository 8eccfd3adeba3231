// The REST endpoints' logic, independent of the HTTP library: a request body
// in, a JSON body or a Server-Sent Events source out. http_server.cc routes
// to these; tests call them directly too.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/common/status.h"
#include "server/service/chat_output.h"
#include "server/service/encoder_service.h"
#include "server/service/generation_service.h"
#include "server/service/input_processor.h"
#include "server/service/qa_service.h"

namespace ropeserve::batch {
class FileStore;   // server/batch/file_store.h
class BatchStore;  // server/batch/batch_store.h
}  // namespace ropeserve::batch

namespace ropeserve::api {

// Produces the text of an event stream ("data: ...\n\n" events).
class EventSource {
 public:
  virtual ~EventSource() = default;
  // Appends the events ready now to `out`, waiting up to `wait` when none
  // is. True once the stream is complete (its last event appended).
  virtual bool Poll(std::string& out, std::chrono::milliseconds wait) = 0;
  // The client went away: cancel every request behind the stream.
  virtual void Cancel() = 0;
};

class ResponseStore;  // server/api/rest/response_store.h
class Lifecycle;      // server/api/lifecycle.h

// One part of a multipart/form-data body.
struct FormPart {
  std::string name;
  std::string filename;
  std::string content;
};

struct RestReply {
  std::string body;                     // JSON, when not streaming
  std::unique_ptr<EventSource> events;  // when streaming
  std::string content_type = "application/json";
};

struct RestRequest {
  const std::string& body;
  double timeout_seconds = 0;  // server's --request-timeout (0 = none)
  // Polled while a unary request runs: true = the client went away, cancel.
  bool (*client_gone)() = nullptr;
  // Set to the body's `user` (OpenAI), which the access log records.
  std::string* user = nullptr;
  // The request's server span: what it starts in the engine is traced under it.
  TraceContext trace{};
  // The Responses API's routes: the store (null: responses are not
  // stored), the caller's identity in it (server/api/rest/response_store.h), and
  // the path's {id} segment ({response_id}, {file_id}).
  ResponseStore* responses = nullptr;
  std::string owner{};
  std::string path_id{};
  // The URL's query parameters, in order (GET .../input_items pages by them).
  std::vector<std::pair<std::string, std::string>> query{};
  // Work that outlives the HTTP request (a background response) takes a
  // ticket of its own here, so a drain waits for it. Null: none is taken.
  Lifecycle* lifecycle = nullptr;
  // The Files API's store (null: no data directory) and, for an upload,
  // the multipart form's parts.
  batch::FileStore* files = nullptr;
  const std::vector<FormPart>* form = nullptr;
  // The Batch API's store (null: no data directory).
  batch::BatchStore* batches = nullptr;
  // The engine priority of what this request starts, over the body's
  // `priority` (batch lines: service::kBatchPriority). Null: the body's.
  std::optional<int> priority{};
};

struct ChatBody;        // server/api/rest/rest_request.h
struct CompletionBody;  // server/api/rest/rest_request.h

// A JSON answer with the keys in insertion order (the Files and Batch
// APIs' objects), and OpenAI's cursor page of such objects: {"object":
// "list", "data", "first_id", "last_id" (the first and last object's "id",
// null when empty), "has_more"} (rest_files.cc).
StatusOr<RestReply> JsonReply(const nlohmann::ordered_json& j);
StatusOr<RestReply> ListReply(nlohmann::ordered_json data, bool has_more);

StatusOr<RestReply> Completions(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> ChatCompletions(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> Summarize(service::GenerationService& service, const RestRequest& request);
// POST /v1/messages and /v1/messages/count_tokens (rest_messages.cc):
// Anthropic's Messages API over the chat path; errors in Anthropic's shape
// are the HTTP layer's (the route's ApiDialect).
StatusOr<RestReply> Messages(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> CountMessageTokens(service::GenerationService& service, const RestRequest& request);
// OpenAI's Responses API (rest_responses.cc): POST /v1/responses, and GET,
// DELETE /v1/responses/{id} and POST /v1/responses/{id}/cancel on stored
// responses. The body runs the chat path; errors are OpenAI's shape.
StatusOr<RestReply> CreateResponse(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> RetrieveResponse(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> DeleteResponse(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> CancelResponse(service::GenerationService& service, const RestRequest& request);
// GET /v1/responses/{id}/input_items: the items a stored response was made
// from (with previous_response_id, the earlier turns' too), paged by
// limit, order, after and before.
StatusOr<RestReply> ListInputItems(service::GenerationService& service, const RestRequest& request);
// OpenAI's Files API (rest_files.cc), on the data directory's store:
// POST /v1/files (multipart: file, purpose; a batch input file is checked
// line by line on upload), GET /v1/files, GET / DELETE /v1/files/{id},
// GET /v1/files/{id}/content.
StatusOr<RestReply> UploadFile(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> ListFiles(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> RetrieveFile(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> DeleteFile(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> FileContent(service::GenerationService& service, const RestRequest& request);
// OpenAI's Batch API (rest_batches.cc), on the data directory's store:
// POST /v1/batches, GET /v1/batches (after, limit), GET
// /v1/batches/{id}, POST /v1/batches/{id}/cancel.
StatusOr<RestReply> CreateBatch(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> ListBatches(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> RetrieveBatch(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> CancelBatch(service::GenerationService& service, const RestRequest& request);
// /v1/completions' prompts tokenized and its fields validated (errors name
// `logprobs` where the validator says top_logprobs).
StatusOr<service::PreparedGeneration> PrepareCompletion(service::GenerationService& service, const CompletionBody& body,
                                                        const RestRequest& request);
// POST /v1/completions/render and /v1/chat/completions/render
// (rest_render.cc): what the generation endpoint would run, as vLLM's
// GenerateRequest (token ids, sampling params), without running it.
StatusOr<RestReply> RenderCompletions(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> RenderChatCompletions(service::GenerationService& service, const RestRequest& request);
// The chat-shaped endpoints' input (for PrepareGeneration) and output
// options (for ChatOutputProcessor), from a chat body.
service::GenerationRequest ChatInput(const ChatBody& body, const RestRequest& request);
service::ChatOutputOptions ChatOutput(const service::GenerationService& service, const ChatBody& body);
// POST /tokenize and /detokenize (rest_tokenize.cc), vLLM's shapes.
StatusOr<RestReply> Tokenize(service::GenerationService& service, const RestRequest& request);
StatusOr<RestReply> Detokenize(service::GenerationService& service, const RestRequest& request);
// POST /v1/qa (rest_qa.cc): one {"question", "context", ...} or
// {"inputs": [...], ...}.
// With `retrieve`, an encoder of `encoders` that scores pairs (the body's
// retrieve.model, or the first) ranks each question's passages first.
StatusOr<RestReply> AnswerQuestions(service::QaService& service, const RestRequest& request,
                                    const std::vector<service::EncoderService*>& encoders = {});
// What an encoder serves (EncoderService::embeds, classifies, scores_pairs).
enum class EncoderTask { kEmbed, kClassify, kScore, kTokenClassify };
// The encoder `model` names, which must serve `task` (empty: the first that
// does): 501 when none does, 404 (model_not_found) for an unknown name, 400
// naming `model` when the named one serves another task.
StatusOr<service::EncoderService*> FindEncoder(const std::vector<service::EncoderService*>& encoders,
                                               const std::string& model, EncoderTask task);
// POST /v1/embeddings (OpenAI) or, with `tei`, /embed (TEI) (rest_embeddings.cc):
// the body's `model` picks one of `encoders` (none named: the first embedder).
StatusOr<RestReply> CreateEmbeddings(const std::vector<service::EncoderService*>& encoders, const RestRequest& request,
                                     bool tei);
// POST /classify, /v1/classify (vLLM) or, with `tei`, /predict (TEI)
// (rest_scoring.cc): a sequence classifier's label scores.
StatusOr<RestReply> Classify(const std::vector<service::EncoderService*>& encoders, const RestRequest& request,
                             bool tei);
// POST /score, /v1/score (vLLM's text_1/text_2) or, with `rerank`, /rerank,
// /v1/rerank, /v2/rerank (vLLM's Jina/Cohere shape, or TEI's when the body
// has "texts") (rest_scoring.cc): a cross-encoder's or an embedder's
// relevance of documents to a query.
StatusOr<RestReply> ScoreDocuments(const std::vector<service::EncoderService*>& encoders, const RestRequest& request,
                                   bool rerank);
// POST /v1/token-classify (rest_scoring.cc): a token classifier's entities
// in each text.
StatusOr<RestReply> ClassifyTokens(const std::vector<service::EncoderService*>& encoders, const RestRequest& request);

}  // namespace ropeserve::api
