// POST /v1/embeddings (OpenAI's shape, as vLLM serves it) and /embed
// (Hugging Face TEI's) around service::EncoderService; the bodies are read
// by rest_embeddings_request.cc.
#include <openssl/evp.h>

#include <cstring>

#include "server/api/rest/rest_handlers.h"
#include "server/api/rest/rest_request.h"
#include "server/common/json_text.h"
#include "server/common/unix_time.h"

namespace ropeserve::api {

using json = nlohmann::json;

namespace {

// The float32 values' bytes (little-endian, as on every host ropeserve
// builds for) in standard base64: what the openai SDK decodes.
std::string Base64Floats(const std::vector<float>& v) {
  const std::size_t n = v.size() * sizeof(float);
  std::string bytes(n, '\0');
  std::memcpy(bytes.data(), v.data(), n);
  std::string out(4 * ((n + 2) / 3) + 1, '\0');
  const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                      reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(n));
  out.resize(static_cast<std::size_t>(written));
  return out;
}

}  // namespace

StatusOr<service::EncoderService*> FindEncoder(const std::vector<service::EncoderService*>& encoders,
                                               const std::string& model, EncoderTask task) {
  auto serves = [task](const service::EncoderService& e) {
    switch (task) {
      case EncoderTask::kEmbed:
        return e.embeds();
      case EncoderTask::kClassify:
        return e.classifies();
      case EncoderTask::kScore:
        return e.scores_pairs();
      case EncoderTask::kTokenClassify:
        return e.classifies_tokens();
    }
    return false;
  };
  const char* kind = task == EncoderTask::kEmbed           ? "embedding model"
                     : task == EncoderTask::kClassify      ? "sequence classifier"
                     : task == EncoderTask::kTokenClassify ? "token classifier"
                                                           : "cross-encoder or embedding model";
  std::string names;
  for (service::EncoderService* e : encoders) {
    if (model.empty() && serves(*e)) return e;
    if (e->name() == model) {
      if (serves(*e)) return e;
      return InvalidArgument("model '" + e->name() + "' serves the " + e->task() +
                             " task, not this endpoint (it needs a " + kind + ")")
          .WithParam("model");
    }
    names += (names.empty() ? "'" : ", '") + e->name() + "'";
  }
  if (model.empty()) return Unimplemented(std::string("no ") + kind + " is loaded (serve --encoder DIR)");
  return NotFound("model '" + model.substr(0, 100) + "' does not exist (encoders: " + names + ")")
      .WithParam("model")
      .WithReason("model_not_found");
}

StatusOr<RestReply> CreateEmbeddings(const std::vector<service::EncoderService*>& encoders, const RestRequest& request,
                                     bool tei) {
  RS_ASSIGN_OR_RETURN(EmbeddingsBody body, ReadEmbeddingsBody(request.body, tei));
  RS_ASSIGN_OR_RETURN(service::EncoderService * service, FindEncoder(encoders, body.model, EncoderTask::kEmbed));
  RS_ASSIGN_OR_RETURN(auto results, service->Embed(body.inputs, body.options, request.timeout_seconds,
                                                   request.client_gone, tei ? "inputs" : "input"));
  RestReply reply;
  if (tei) {  // [[f32, ...], ...]
    json out = json::array();
    for (const auto& r : results) out.push_back(r.embedding);
    reply.body = Dump(out);
    return reply;
  }
  std::int64_t tokens = 0;
  json data = json::array();
  for (std::size_t i = 0; i < results.size(); ++i) {
    tokens += results[i].tokens;
    json item = {{"object", "embedding"}, {"index", i}};
    item["embedding"] = body.base64 ? json(Base64Floats(results[i].embedding)) : json(results[i].embedding);
    data.push_back(std::move(item));
  }
  const auto created = UnixSeconds();
  json out = {{"id", service->NextRequestId()},
              {"object", "list"},
              {"created", created},
              {"model", service->name()},
              {"data", std::move(data)},
              {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
  reply.body = Dump(out);
  return reply;
}

}  // namespace ropeserve::api
