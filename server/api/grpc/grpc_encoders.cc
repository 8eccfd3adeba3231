#include "server/api/grpc/grpc_encoders.h"

#include "server/api/grpc/grpc_request.h"

namespace ropeserve::api::grpc_encoders {

namespace v1 = ::ropeserve::v1;

Started Embed(service::EncoderService& e, const v1::EmbedRequest& req, v1::EmbedResponse* out, Link link,
              double timeout) {
  RS_ASSIGN_OR_RETURN(GrpcEmbed in, ReadEmbed(req));
  return e.EmbedAsync(in.inputs, in.options, timeout, [&e, out, link](StatusOr<std::vector<service::EmbedResult>> got) {
    DeferredUnaryCall::Complete(link, got.status(), [&] {
      out->set_id(e.NextRequestId());
      out->set_model(e.name());
      std::int64_t tokens = 0;
      for (const auto& x : *got) {
        auto* v = out->add_embeddings();
        v->mutable_values()->Add(x.embedding.begin(), x.embedding.end());
        v->set_tokens(x.tokens);
        tokens += x.tokens;
      }
      out->mutable_usage()->set_prompt_tokens(tokens);
    });
  });
}

Started Classify(service::EncoderService& e, const v1::ClassifyRequest& req, v1::ClassifyResponse* out, Link link,
                 double timeout) {
  RS_ASSIGN_OR_RETURN(GrpcClassify in, ReadClassify(req));
  return e.ClassifyAsync(in.inputs, in.options, timeout,
                         [&e, out, link](StatusOr<std::vector<service::ClassifyResult>> got) {
                           DeferredUnaryCall::Complete(link, got.status(), [&] {
                             out->set_id(e.NextRequestId("classify"));
                             out->set_model(e.name());
                             const std::vector<std::string>& labels = e.config().labels;
                             std::int64_t tokens = 0;
                             for (const auto& x : *got) {
                               auto* c = out->add_results();
                               for (std::size_t k = 0; k < x.scores.size(); ++k) {
                                 auto* l = c->add_scores();
                                 l->set_label(labels[k]);
                                 l->set_score(x.scores[k]);
                               }
                               c->set_label(labels[service::RankDescending(x.scores, 1)[0]]);
                               c->set_tokens(x.tokens);
                               tokens += x.tokens;
                             }
                             out->mutable_usage()->set_prompt_tokens(tokens);
                           });
                         });
}

Started Rerank(service::EncoderService& e, const v1::RerankRequest& req, v1::RerankResponse* out, Link link,
               double timeout) {
  RS_ASSIGN_OR_RETURN(GrpcRerank in, ReadRerank(req));
  service::EncoderService::ScorePairs pairs;
  pairs.queries = {in.query};
  pairs.documents = std::move(in.documents);
  const std::int64_t top_n = in.top_n;
  return e.ScoreAsync(pairs, in.options, timeout,
                      [&e, out, link, top_n](StatusOr<std::vector<service::ScoreResult>> got) {
                        DeferredUnaryCall::Complete(link, got.status(), [&] {
                          out->set_id(e.NextRequestId("rerank"));
                          out->set_model(e.name());
                          std::int64_t tokens = 0;
                          for (const service::ScoreResult& r : *got) tokens += r.tokens;
                          for (std::size_t i : service::RankByScore(*got, static_cast<std::size_t>(top_n))) {
                            auto* x = out->add_results();
                            x->set_index(static_cast<std::int32_t>(i));
                            x->set_relevance_score((*got)[i].score);
                          }
                          out->mutable_usage()->set_prompt_tokens(tokens);
                        });
                      });
}

Started ClassifyTokens(service::EncoderService& e, const v1::ClassifyTokensRequest& req,
                       v1::ClassifyTokensResponse* out, Link link, double timeout) {
  RS_ASSIGN_OR_RETURN(GrpcClassifyTokens in, ReadClassifyTokens(req));
  // The texts, for the offsets' unit (the request outlives the call).
  const auto* texts = &req.texts();
  const qa::Aggregation aggregation = in.options.aggregation;
  const qa::OffsetUnit unit = in.offset_unit;
  return e.ClassifyTokensAsync(
      in.inputs, in.options, timeout,
      [&e, out, link, texts, aggregation, unit](StatusOr<std::vector<service::TokenClassifyResult>> got) {
        DeferredUnaryCall::Complete(link, got.status(), [&] {
          out->set_id(e.NextRequestId("tokcls"));
          out->set_model(e.name());
          out->set_aggregation_strategy(qa::AggregationName(aggregation));
          out->set_offset_unit(qa::OffsetUnitName(unit));
          std::int64_t tokens = 0;
          for (std::size_t i = 0; i < got->size(); ++i) {
            const service::TokenClassifyResult& r = (*got)[i];
            auto* c = out->add_results();
            const qa::OffsetMap offsets((*texts)[static_cast<int>(i)], unit);
            for (const qa::Entity& x : r.entities) {
              auto* ent = c->add_entities();
              ent->set_label(x.label);
              ent->set_score(x.score);
              ent->set_word(x.word);
              const auto [start, end] = offsets(x.start, x.end);
              ent->set_start(start);
              ent->set_end(end);
              ent->set_index(aggregation == qa::Aggregation::kNone ? x.index : -1);
            }
            c->set_tokens(r.tokens);
            tokens += r.tokens;
          }
          out->mutable_usage()->set_prompt_tokens(tokens);
        });
      },
      "texts");
}

}  // namespace ropeserve::api::grpc_encoders
