// The encoder RPCs' work (Embed, Classify, Rerank, ClassifyTokens): each
// reads its request, starts the encoder service's asynchronous call, and
// its completion fills the response and completes the deferred call.
// grpc_service.cc picks the encoder (FindEncoder) and runs these on its
// work pool (GrpcService's EncoderRpc); REST's twins are rest_embeddings.cc
// and rest_scoring.cc.
#pragma once

#include <memory>

#include "proto/ropeserve/v1/ropeserve.pb.h"
#include "server/api/grpc/grpc_calls.h"
#include "server/common/status.h"
#include "server/service/encoder_service.h"

namespace ropeserve::api::grpc_encoders {

using Link = std::shared_ptr<DeferredUnaryCall::Link>;
using Started = StatusOr<std::shared_ptr<service::EncoderCall>>;

Started Embed(service::EncoderService& e, const ::ropeserve::v1::EmbedRequest& req, ::ropeserve::v1::EmbedResponse* out,
              Link link, double timeout);
Started Classify(service::EncoderService& e, const ::ropeserve::v1::ClassifyRequest& req,
                 ::ropeserve::v1::ClassifyResponse* out, Link link, double timeout);
Started Rerank(service::EncoderService& e, const ::ropeserve::v1::RerankRequest& req,
               ::ropeserve::v1::RerankResponse* out, Link link, double timeout);
Started ClassifyTokens(service::EncoderService& e, const ::ropeserve::v1::ClassifyTokensRequest& req,
                       ::ropeserve::v1::ClassifyTokensResponse* out, Link link, double timeout);

}  // namespace ropeserve::api::grpc_encoders
