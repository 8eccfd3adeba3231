// OpenAI's Files API over the data directory's store (server/batch/
// file_store.h): POST /v1/files (multipart/form-data, as the openai SDK's
// files.create sends it), GET /v1/files, GET / DELETE /v1/files/{id},
// GET /v1/files/{id}/content. Only purpose "batch" is taken: a batch input
// file, checked line by line on upload (server/batch/batch_input.h) with
// the same request readers online requests go through.
#include <nlohmann/json.hpp>

#include <string>

#include "server/api/rest/batch_executor.h"
#include "server/api/rest/rest_handlers.h"
#include "server/api/rest/rest_request.h"
#include "server/batch/batch_input.h"
#include "server/batch/file_store.h"
#include "server/common/json_text.h"

namespace ropeserve::api {

namespace {

using json = nlohmann::ordered_json;

json FileObject(const batch::FileInfo& f) {
  return {{"id", f.id},
          {"object", "file"},
          {"bytes", f.bytes},
          {"created_at", f.created_at},
          {"expires_at", f.expires_at > 0 ? json(f.expires_at) : json(nullptr)},
          {"filename", f.filename},
          {"purpose", f.purpose},
          {"status", "processed"},
          {"status_details", nullptr}};
}

StatusOr<batch::FileStore*> Files(const RestRequest& request) {
  if (request.files == nullptr)
    return FailedPrecondition("the Files API needs a data directory: start the server with --data-dir DIR");
  return request.files;
}

// expires_after[seconds] (with anchor created_at): OpenAI's 1 hour to 30 days.
StatusOr<std::int64_t> ExpiresAfter(const std::string& anchor, const std::string& seconds) {
  if (anchor.empty() && seconds.empty()) return std::int64_t{0};
  if (anchor != "created_at") return Malformed("expires_after[anchor]", "'expires_after[anchor]' must be created_at");
  return IntegerParam("expires_after[seconds]", seconds, 3600, 2592000);
}

}  // namespace

StatusOr<RestReply> JsonReply(const json& j) {
  RestReply reply;
  reply.body = DumpOrdered(j);
  return reply;
}

StatusOr<RestReply> ListReply(json data, bool has_more) {
  json first = data.empty() ? json(nullptr) : data.front()["id"];
  json last = data.empty() ? json(nullptr) : data.back()["id"];
  return JsonReply({{"object", "list"},
                    {"data", std::move(data)},
                    {"first_id", std::move(first)},
                    {"last_id", std::move(last)},
                    {"has_more", has_more}});
}

// A batch line's body, read by its endpoint's own reader. Streaming has
// no place in a batch.
Status CheckBatchBody(const std::string& url, const std::string& body) {
  RS_ASSIGN_OR_RETURN(json object, ParseJsonObject(body));
  if (auto s = object.find("stream"); s != object.end() && *s == true)
    return Malformed("stream", "a batch request cannot be streamed");
  if (url == "/v1/chat/completions") return ReadChatBody(body).status();
  if (url == "/v1/completions") return ReadCompletionBody(body).status();
  if (url == "/v1/summarize") return ReadSummarizeBody(body).status();
  if (url == "/v1/qa") return ReadQaBody(body).status();
  if (url == "/v1/responses") {
    if (auto b = object.find("background"); b != object.end() && *b == true)
      return Malformed("background", "a batch request cannot run in the background");
    RS_ASSIGN_OR_RETURN(ResponsesBody r, ReadResponsesBody(body));
    return WithResponsesParam(ResponsesChat(r, json::array()).status());
  }
  return Malformed("url", "unsupported endpoint");
}

StatusOr<RestReply> UploadFile(service::GenerationService&, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(batch::FileStore * files, Files(request));
  if (request.form == nullptr)
    return MalformedRequest("POST /v1/files takes multipart/form-data with the fields 'file' and 'purpose'");
  const FormPart* file = nullptr;
  std::string purpose, anchor, seconds;
  bool has_purpose = false;
  for (const FormPart& p : *request.form) {
    if (p.name == "file") {
      if (file != nullptr) return Malformed("file", "only one 'file' per upload");
      file = &p;
    } else if (p.name == "purpose") {
      purpose = p.content;
      has_purpose = true;
    } else if (p.name == "expires_after[anchor]") {
      anchor = p.content;
    } else if (p.name == "expires_after[seconds]") {
      seconds = p.content;
    } else {
      return Malformed(p.name.substr(0, 100), "unknown form field '" + p.name.substr(0, 100) + "'");
    }
  }
  if (file == nullptr) return Malformed("file", "the form has no 'file'");
  if (!has_purpose) return Malformed("purpose", "the form has no 'purpose'");
  if (purpose != "batch")
    return Malformed("purpose", "'purpose' must be batch (the only purpose this server takes files for)");
  RS_ASSIGN_OR_RETURN(std::int64_t expires_after, ExpiresAfter(anchor, seconds));
  std::string filename = file->filename.empty() ? "file.jsonl" : file->filename;
  if (filename.size() > 255) return Malformed("file", "the file's name is longer than 255 bytes");
  batch::BatchInputLimits limits;
  RS_RETURN_IF_ERROR(batch::ReadBatchInput(file->content, limits, &CheckBatchBody).status());
  RS_ASSIGN_OR_RETURN(batch::FileInfo f, files->Create(request.owner, filename, purpose, file->content, expires_after));
  return JsonReply(FileObject(f));
}

StatusOr<RestReply> ListFiles(service::GenerationService&, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(batch::FileStore * files, Files(request));
  std::string purpose, after;
  std::size_t limit = 10000;
  bool ascending = false;
  for (const auto& [key, value] : request.query) {
    if (key == "purpose") {
      purpose = value;
    } else if (key == "after") {
      after = value;
    } else if (key == "order") {
      RS_ASSIGN_OR_RETURN(ascending, AscendingParam(value));
    } else if (key == "limit") {
      RS_ASSIGN_OR_RETURN(std::int64_t n, IntegerParam("limit", value, 1, 10000));
      limit = static_cast<std::size_t>(n);
    } else {
      return Malformed(key.substr(0, 100), "unknown query parameter '" + key.substr(0, 100) + "'");
    }
  }
  RS_ASSIGN_OR_RETURN(batch::FileStore::Page page, files->List(request.owner, purpose, after, limit, ascending));
  json data = json::array();
  for (const auto& f : page.files) data.push_back(FileObject(f));
  return ListReply(std::move(data), page.has_more);
}

StatusOr<RestReply> RetrieveFile(service::GenerationService&, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(batch::FileStore * files, Files(request));
  RS_ASSIGN_OR_RETURN(batch::FileInfo f, files->Get(request.path_id, request.owner));
  return JsonReply(FileObject(f));
}

StatusOr<RestReply> DeleteFile(service::GenerationService&, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(batch::FileStore * files, Files(request));
  RS_RETURN_IF_ERROR(files->Delete(request.path_id, request.owner));
  return JsonReply({{"id", request.path_id}, {"object", "file"}, {"deleted", true}});
}

StatusOr<RestReply> FileContent(service::GenerationService&, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(batch::FileStore * files, Files(request));
  RS_ASSIGN_OR_RETURN(std::string content, files->Content(request.path_id, request.owner));
  RestReply reply;
  reply.body = std::move(content);
  reply.content_type = "application/octet-stream";
  return reply;
}

}  // namespace ropeserve::api
