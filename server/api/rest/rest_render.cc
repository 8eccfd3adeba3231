// POST /v1/completions/render and POST /v1/chat/completions/render, with
// vLLM's request and response shapes: the body of a completions or chat
// request in, what that request would run out (vLLM's GenerateRequest:
// the prompt's token ids and the sampling params), nothing generated.
// llm-d's router (its token-producer) tokenizes each prompt through them
// and hashes the ids into the block keys our KV cache events name.
//
// The body is read, tokenized and validated by the generation endpoint's
// own path (ReadCompletionObject / ReadChatObject, PrepareGeneration): a
// request /v1/completions would refuse, render refuses with the same
// error, and the ids are the ones the engine would be given.
#include <nlohmann/json.hpp>

#include <numeric>

#include "server/api/rest/rest_handlers.h"
#include "server/api/rest/rest_request.h"
#include "server/common/json_text.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve::api {

using json = nlohmann::json;

namespace {

// vLLM's SamplingParams, as its render endpoints serialize them, from the
// validated options (the values generation would use, defaults applied).
json SamplingParamsJson(const GenerationBody& body, const service::ValidatedGeneration& v) {
  const GenerateOptions& o = v.options();
  json stop = o.stop, stop_ids = o.stop_token_ids;
  json bias = nullptr;
  if (!o.logit_bias.empty()) {
    bias = json::object();
    for (const auto& [id, value] : o.logit_bias) bias[std::to_string(id)] = value;
  }
  json structured = nullptr;
  switch (o.constraint.kind) {
    case structured::Constraint::Kind::kNone:
      break;
    case structured::Constraint::Kind::kJsonSchema:
      structured = {{"json", json::parse(o.constraint.text, nullptr, /*allow_exceptions=*/false)}};
      break;
    case structured::Constraint::Kind::kJsonObject:
      structured = {{"json_object", true}};
      break;
    case structured::Constraint::Kind::kRegex:
      structured = {{"regex", o.constraint.text}};
      break;
    case structured::Constraint::Kind::kChoice:
      structured = {{"choice", o.constraint.choices}};
      break;
  }
  return {{"n", v.n()},
          {"temperature", o.sampling.temperature},
          {"top_p", o.sampling.top_p},
          {"top_k", o.sampling.top_k},
          {"min_p", o.sampling.min_p},
          {"seed", o.sampling.seed ? json(*o.sampling.seed) : json(nullptr)},
          {"presence_penalty", o.sampling.presence_penalty},
          {"frequency_penalty", o.sampling.frequency_penalty},
          {"repetition_penalty", o.sampling.repetition_penalty},
          {"max_tokens", o.max_tokens},
          {"min_tokens", o.min_tokens},
          {"stop", std::move(stop)},
          {"stop_token_ids", std::move(stop_ids)},
          {"ignore_eos", o.ignore_eos},
          {"logprobs", body.logprobs ? json(o.top_logprobs) : json(nullptr)},
          {"prompt_logprobs", o.prompt_logprobs ? json(*o.prompt_logprobs) : json(nullptr)},
          {"logit_bias", std::move(bias)},
          {"structured_outputs", std::move(structured)},
          {"skip_special_tokens", o.skip_special_tokens},
          {"include_stop_str_in_output", o.include_stop_str_in_output},
          {"allowed_token_ids", o.allowed_token_ids.empty() ? json(nullptr) : json(o.allowed_token_ids)},
          {"bad_words", o.bad_words},
          {"truncate_prompt_tokens",
           body.fields.truncate_prompt_tokens ? json(*body.fields.truncate_prompt_tokens) : json(nullptr)}};
}

// Each token's [start, end) in code points of `text` (what Python's str
// indexes, as vLLM's token_offsets), when asked and the prompt is text;
// null otherwise (token-id prompts have no text). A prompt cut by
// truncate_prompt_tokens has the offsets of the tokens it kept.
StatusOr<json> TokenOffsets(const service::GenerationService& service, const GenerationBody& body,
                            const RenderOptions& render, const std::string* text, bool add_special_tokens,
                            std::size_t expected) {
  if (!render.return_token_offsets || text == nullptr || service.tokenizer() == nullptr) return json(nullptr);
  RS_ASSIGN_OR_RETURN(tok::Encoding e, service.tokenizer()->Encode(*text, add_special_tokens));
  std::vector<std::size_t> kept(e.offsets.size());
  std::iota(kept.begin(), kept.end(), std::size_t{0});
  if (body.fields.truncate_prompt_tokens) {
    RS_ASSIGN_OR_RETURN(kept, service::KeptByLeftTruncation(e, expected));  // the tokens the prompt kept
  }
  if (kept.size() != expected || e.offsets.size() != e.ids.size())
    return Internal("the prompt's offsets do not match its tokens");
  json out = json::array();
  for (std::size_t i : kept) out.push_back({e.offsets[i].start, e.offsets[i].end});
  return out;
}

// One GenerateRequest (vLLM's field order).
json GenerateRequest(service::GenerationService& service, const GenerationBody& body, std::string request_id,
                     const std::vector<std::int64_t>& ids, json offsets, const service::ValidatedGeneration& v) {
  return {{"request_id", std::move(request_id)},
          {"token_ids", ids},
          {"token_offsets", std::move(offsets)},
          {"features", nullptr},
          {"sampling_params", SamplingParamsJson(body, v)},
          {"model", service.name()},
          {"stream", body.stream},
          {"stream_options", body.stream ? json{{"include_usage", body.include_usage}} : json(nullptr)},
          {"cache_salt", nullptr},
          {"priority", v.options().priority},
          {"kv_transfer_params", nullptr}};
}

}  // namespace

// A list: one GenerateRequest per prompt (request ids "<request_id>-<i>"
// for several prompts when the body names one).
StatusOr<RestReply> RenderCompletions(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(CompletionRenderBody in, ReadCompletionRenderBody(request.body));
  if (request.user != nullptr) *request.user = in.body.user;
  RS_ASSIGN_OR_RETURN(const service::PreparedGeneration prepared, PrepareCompletion(service, in.body, request));
  json out = json::array();
  for (std::size_t p = 0; p < prepared.prompts.size(); ++p) {
    const std::vector<std::int64_t>& ids = prepared.prompts[p];
    const std::string* text = in.body.prompts[p].text ? &*in.body.prompts[p].text : nullptr;
    RS_ASSIGN_OR_RETURN(json offsets,
                        TokenOffsets(service, in.body, in.render, text, /*add_special_tokens=*/true, ids.size()));
    std::string id = in.render.request_id.empty()   ? service.NextRequestId("cmpl")
                     : prepared.prompts.size() == 1 ? in.render.request_id
                                                    : in.render.request_id + "-" + std::to_string(p);
    out.push_back(GenerateRequest(service, in.body, std::move(id), ids, std::move(offsets), prepared.generation));
  }
  RestReply reply;
  reply.body = Dump(out);
  return reply;
}

// One GenerateRequest: the messages rendered with the chat template and
// tokenized without added special tokens (offsets index the rendered text).
StatusOr<RestReply> RenderChatCompletions(service::GenerationService& service, const RestRequest& request) {
  RS_ASSIGN_OR_RETURN(ChatRenderBody in, ReadChatRenderBody(request.body));
  if (request.user != nullptr) *request.user = in.body.user;
  RS_ASSIGN_OR_RETURN(const service::PreparedGeneration prepared,
                      service::PrepareGeneration(service, ChatInput(in.body, request)));
  const std::vector<std::int64_t>& ids = prepared.prompts[0];
  RS_ASSIGN_OR_RETURN(json offsets, TokenOffsets(service, in.body, in.render, &prepared.rendered_chat,
                                                 /*add_special_tokens=*/false, ids.size()));
  std::string id = in.render.request_id.empty() ? service.NextRequestId("chatcmpl") : in.render.request_id;
  RestReply reply;
  reply.body = Dump(GenerateRequest(service, in.body, std::move(id), ids, std::move(offsets), prepared.generation));
  return reply;
}

}  // namespace ropeserve::api
