// Reading gRPC request messages into the transport-neutral fields of
// server/service/request_params.h. Proto3 scalars have no "unset": 0 (or
// an empty string) means "the default", as the .proto comments say.
// Torch-free and model-free: tests/fuzz/grpc_request_fuzz.cc fuzzes it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/ropeserve/v1/ropeserve.pb.h"
#include "server/common/status.h"
#include "server/service/encoder_service.h"
#include "server/service/request_params.h"

namespace ropeserve::api {

struct GrpcGenerate {
  std::string model;
  std::optional<std::string> prompt;  // text, or
  std::vector<std::int64_t> prompt_ids;
  service::GenerationFields fields;
};

struct GrpcSummarize {
  std::string model;
  service::SummaryFields summary;
  service::GenerationFields fields;
};

struct GrpcAnswer {
  std::string model;
  std::string question;
  std::string context;
  std::vector<service::QaPassage> passages;  // instead of context
  service::QaFields fields;
};

StatusOr<GrpcGenerate> ReadGenerate(const ::ropeserve::v1::GenerateRequest& req);
StatusOr<GrpcSummarize> ReadSummarize(const ::ropeserve::v1::SummarizeRequest& req);
StatusOr<GrpcAnswer> ReadAnswer(const ::ropeserve::v1::AnswerRequest& req);

struct GrpcEmbed {
  std::vector<service::EncoderInput> inputs;
  service::EmbedOptions options;
};
// Each input is a text or token ids; the service checks the rest (empty
// inputs, ids outside the vocabulary, lengths).
StatusOr<GrpcEmbed> ReadEmbed(const ::ropeserve::v1::EmbedRequest& req);

struct GrpcClassify {
  std::vector<service::EncoderInput> inputs;
  service::ClassifyOptions options;
};
// Each input is a text or a pair of texts.
StatusOr<GrpcClassify> ReadClassify(const ::ropeserve::v1::ClassifyRequest& req);

struct GrpcRerank {
  std::string query;
  std::vector<std::string> documents;
  service::ScoreOptions options;
  std::int64_t top_n = 0;
};
// top_n must not be negative; the service checks the texts.
StatusOr<GrpcRerank> ReadRerank(const ::ropeserve::v1::RerankRequest& req);

struct GrpcClassifyTokens {
  std::vector<service::EncoderInput> inputs;
  service::TokenClassifyOptions options;
  qa::OffsetUnit offset_unit = qa::OffsetUnit::kCodePoint;
};
// aggregation_strategy and offset_unit must be known names (or empty).
StatusOr<GrpcClassifyTokens> ReadClassifyTokens(const ::ropeserve::v1::ClassifyTokensRequest& req);

}  // namespace ropeserve::api
