#include "server/api/grpc/grpc_request.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "server/common/json_text.h"

namespace ropeserve::api {

namespace v1 = ::ropeserve::v1;

namespace {

// 0 = unset for proto3 scalars.
template <typename T>
std::optional<T> NonZero(T v) {
  return v == T{} ? std::nullopt : std::optional<T>(v);
}

void ReadSampling(const v1::SamplingParams& s, service::GenerationFields& f) {
  f.temperature = NonZero(s.temperature());
  f.top_p = NonZero(s.top_p());
  f.top_k = NonZero(s.top_k());
  f.min_p = NonZero(s.min_p());
  if (s.has_seed()) f.seed = s.seed();
  if (s.has_repetition_penalty()) f.repetition_penalty = s.repetition_penalty();
  f.frequency_penalty = NonZero(s.frequency_penalty());
  f.presence_penalty = NonZero(s.presence_penalty());
  if (s.has_speculative()) f.speculative = s.speculative();
  // In id order (a map's order is unspecified); one more entry than the cap
  // is enough for the validator to refuse the request.
  for (const auto& [id, bias] : s.logit_bias()) {
    if (f.logit_bias.size() > static_cast<std::size_t>(service::kMaxLogitBias)) break;
    f.logit_bias.emplace_back(id, bias);
  }
  std::sort(f.logit_bias.begin(), f.logit_bias.end());
  if (s.allowed_token_ids_size() > 0) {
    f.allowed_token_ids.emplace();
    for (const auto id : s.allowed_token_ids()) {
      if (f.allowed_token_ids->size() > service::kMaxAllowedTokenIds) break;  // enough to be refused
      f.allowed_token_ids->push_back(id);
    }
  }
  for (const auto& w : s.bad_words()) {
    if (f.bad_words.size() > static_cast<std::size_t>(service::kMaxBadWords)) break;
    f.bad_words.push_back(w);
  }
}

// The validator caps how many stop strings a request may have; copying
// one more than that is enough for it to refuse the request.
std::vector<std::string> Stops(const google::protobuf::RepeatedPtrField<std::string>& stop) {
  std::vector<std::string> out;
  for (const auto& st : stop) {
    if (out.size() > static_cast<std::size_t>(service::kMaxStopStrings)) break;
    out.push_back(st);
  }
  return out;
}

// The request's OutputConstraint (unset: none).
Status ReadConstraint(const v1::OutputConstraint& c, structured::Constraint& out) {
  using K = structured::Constraint::Kind;
  switch (c.kind_case()) {
    case v1::OutputConstraint::KIND_NOT_SET:
      return Status::Ok();
    case v1::OutputConstraint::kJsonSchema: {
      // The REST bodies' nesting limit holds here too (parsers recurse).
      RS_RETURN_IF_ERROR(CheckJsonDepth(c.json_schema()).WithParam("constraint.json_schema"));
      nlohmann::ordered_json s = nlohmann::ordered_json::parse(c.json_schema(), nullptr, false);
      if (s.is_discarded() || !(s.is_object() || s.is_boolean()))
        return InvalidArgument("constraint.json_schema must be the JSON text of a JSON Schema")
            .WithParam("constraint.json_schema");
      out = {K::kJsonSchema, s.dump(), {}, "constraint.json_schema"};
      return Status::Ok();
    }
    case v1::OutputConstraint::kJsonObject:
      if (c.json_object()) out = {K::kJsonObject, "", {}, "constraint.json_object"};
      return Status::Ok();
    case v1::OutputConstraint::kRegex:
      // Its limits, as the choice's, are the validator's (request_params.cc).
      out = {K::kRegex, c.regex(), {}, "constraint.regex"};
      return Status::Ok();
    case v1::OutputConstraint::kChoice:
      out = {K::kChoice, "", {c.choice().values().begin(), c.choice().values().end()}, "constraint.choice"};
      return Status::Ok();
  }
  return InvalidArgument("unknown constraint kind").WithParam("constraint");
}

}  // namespace

StatusOr<GrpcGenerate> ReadGenerate(const v1::GenerateRequest& req) {
  GrpcGenerate out;
  out.model = req.model();
  service::GenerationFields& f = out.fields;
  f.max_tokens = NonZero(req.max_tokens());
  ReadSampling(req.sampling(), f);
  f.min_tokens = NonZero(req.min_tokens());
  if (req.top_logprobs() > 0) f.top_logprobs = static_cast<std::int64_t>(req.top_logprobs());
  if (req.ignore_eos()) f.ignore_eos = true;
  f.stop = Stops(req.stop());
  for (const auto id : req.stop_token_ids()) {
    if (f.stop_token_ids.size() > static_cast<std::size_t>(service::kMaxStopTokenIds)) break;
    f.stop_token_ids.push_back(id);
  }
  RS_RETURN_IF_ERROR(ReadConstraint(req.constraint(), f.constraint));
  if (req.include_stop_str_in_output()) f.include_stop_str_in_output = true;
  if (req.has_skip_special_tokens()) f.skip_special_tokens = req.skip_special_tokens();
  if (req.has_truncate_prompt_tokens()) f.truncate_prompt_tokens = req.truncate_prompt_tokens();
  if (!req.prompt().empty()) {
    if (req.prompt_ids_size() > 0)
      return InvalidArgument("give either prompt_ids or prompt, not both").WithParam("prompt");
    out.prompt = req.prompt();
  } else {
    if (req.prompt_ids_size() == 0)
      return InvalidArgument("prompt_ids (or prompt) is required").WithParam("prompt_ids");
    out.prompt_ids.assign(req.prompt_ids().begin(), req.prompt_ids().end());
  }
  return out;
}

StatusOr<GrpcSummarize> ReadSummarize(const v1::SummarizeRequest& req) {
  GrpcSummarize out;
  out.model = req.model();
  if (req.text().empty()) return InvalidArgument("'text' is required").WithParam("text");
  service::SummaryFields& s = out.summary;
  s.text = req.text();
  s.instruction = req.instruction();
  if (!req.strategy().empty()) s.strategy = req.strategy();
  if (!req.style().empty()) s.style = req.style();
  s.focus = req.focus();
  s.language = req.language();
  s.chunk_tokens = NonZero(req.chunk_tokens());
  if (req.has_chunk_overlap()) s.chunk_overlap = req.chunk_overlap();
  s.chunk_max_tokens = NonZero(req.chunk_max_tokens());
  out.fields.max_tokens = NonZero(req.max_tokens());
  ReadSampling(req.sampling(), out.fields);
  out.fields.stop = Stops(req.stop());
  RS_RETURN_IF_ERROR(ReadConstraint(req.constraint(), out.fields.constraint));
  return out;
}

StatusOr<GrpcAnswer> ReadAnswer(const v1::AnswerRequest& req) {
  GrpcAnswer out;
  out.model = req.model();
  out.question = req.question();
  out.context = req.context();
  if (req.passages_size() > 0 && !req.context().empty())
    return InvalidArgument("give 'context' or 'passages', not both").WithParam("passages");
  if (req.passages_size() > service::kMaxQaPassages)
    return InvalidArgument("at most " + std::to_string(service::kMaxQaPassages) + " passages per question")
        .WithParam("passages");
  for (const auto& p : req.passages()) {
    service::QaPassage q;
    if (!p.id().empty()) q.id = p.id();
    q.text = p.text();
    out.passages.push_back(std::move(q));
  }
  service::QaFields& f = out.fields;
  f.top_k = NonZero<std::int64_t>(req.top_k());
  f.max_answer_len = NonZero<std::int64_t>(req.max_answer_len());
  f.max_seq_len = NonZero<std::int64_t>(req.max_seq_len());
  f.doc_stride = NonZero<std::int64_t>(req.doc_stride());
  f.max_question_len = NonZero<std::int64_t>(req.max_question_len());
  if (req.handle_impossible_answer()) f.handle_impossible_answer = true;
  if (!req.scoring().empty()) f.scoring = req.scoring();
  if (!req.offset_unit().empty()) f.offset_unit = req.offset_unit();
  return out;
}

StatusOr<GrpcEmbed> ReadEmbed(const v1::EmbedRequest& req) {
  GrpcEmbed out;
  if (req.inputs_size() == 0) return InvalidArgument("'inputs' is required").WithParam("inputs");
  for (int i = 0; i < req.inputs_size(); ++i) {
    const v1::EmbedInput& in = req.inputs(i);
    switch (in.input_case()) {
      case v1::EmbedInput::kText:
        out.inputs.push_back(service::EncoderInput::Text(in.text()));
        break;
      case v1::EmbedInput::kIds:
        out.inputs.push_back(
            service::EncoderInput::Ids(std::vector<TokenId>(in.ids().ids().begin(), in.ids().ids().end())));
        break;
      default:
        return InvalidArgument("an input is a text or token ids").WithParam("inputs[" + std::to_string(i) + "]");
    }
  }
  if (req.has_normalize()) out.options.normalize = req.normalize();
  out.options.truncate = req.truncate();
  out.options.truncate_left = req.truncate_left();
  if (req.has_dimensions()) out.options.dimensions = req.dimensions();
  if (req.has_prompt_name()) out.options.prompt_name = req.prompt_name();
  return out;
}

StatusOr<GrpcClassify> ReadClassify(const v1::ClassifyRequest& req) {
  GrpcClassify out;
  if (req.inputs_size() == 0) return InvalidArgument("'inputs' is required").WithParam("inputs");
  for (int i = 0; i < req.inputs_size(); ++i) {
    const v1::ClassifyInput& in = req.inputs(i);
    switch (in.input_case()) {
      case v1::ClassifyInput::kText:
        out.inputs.push_back(service::EncoderInput::Text(in.text()));
        break;
      case v1::ClassifyInput::kPair:
        out.inputs.push_back(service::EncoderInput::Pair(in.pair().first(), in.pair().second()));
        break;
      default:
        return InvalidArgument("an input is a text or a pair of texts").WithParam("inputs[" + std::to_string(i) + "]");
    }
  }
  if (req.raw_scores()) out.options.activation = service::ClassifyOptions::Activation::kNone;
  out.options.truncate = req.truncate();
  out.options.truncate_left = req.truncate_left();
  return out;
}

StatusOr<GrpcRerank> ReadRerank(const v1::RerankRequest& req) {
  GrpcRerank out;
  if (req.top_n() < 0) return InvalidArgument("top_n must be 0 (all) or positive").WithParam("top_n");
  out.query = req.query();
  out.documents.assign(req.documents().begin(), req.documents().end());
  out.top_n = req.top_n();
  out.options.raw = req.raw_scores();
  out.options.truncate = req.truncate();
  out.options.truncate_left = req.truncate_left();
  return out;
}

StatusOr<GrpcClassifyTokens> ReadClassifyTokens(const v1::ClassifyTokensRequest& req) {
  GrpcClassifyTokens out;
  for (const std::string& t : req.texts()) out.inputs.push_back(service::EncoderInput::Text(t));
  if (!req.aggregation_strategy().empty()) {
    const auto a = qa::ParseAggregation(req.aggregation_strategy());
    if (!a)
      return InvalidArgument("aggregation_strategy must be none, simple, first, max or average")
          .WithParam("aggregation_strategy");
    out.options.aggregation = *a;
  }
  if (req.has_ignore_labels())
    out.options.ignore_labels.assign(req.ignore_labels().labels().begin(), req.ignore_labels().labels().end());
  if (!req.offset_unit().empty()) {
    const auto u = qa::ParseOffsetUnit(req.offset_unit());
    if (!u) return InvalidArgument("offset_unit must be code_point, utf16 or utf8_byte").WithParam("offset_unit");
    out.offset_unit = *u;
  }
  out.options.truncate = req.truncate();
  out.options.truncate_left = req.truncate_left();
  return out;
}

}  // namespace ropeserve::api
