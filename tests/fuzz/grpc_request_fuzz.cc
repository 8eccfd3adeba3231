// libFuzzer target: arbitrary bytes as gRPC request messages (what the
// server receives once the transport has framed them), through the
// conversion to the validator's fields (server/api/grpc/grpc_request.h) and the
// validator. Errors are fine; crashes, hangs and leaks are not.
#include <cstdint>

#include "server/api/grpc/grpc_request.h"

namespace {

using namespace ropeserve;

service::Limits Limits() {
  service::Limits l;
  l.max_model_len = 4096;
  l.vocab_size = 32000;
  l.max_request_tokens = 1 << 16;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto* msg = data + 1;
  const int len = static_cast<int>(size - 1);
  switch (data[0] % 3) {
    case 0: {
      v1::GenerateRequest req;
      if (!req.ParseFromArray(msg, len)) return 0;
      auto r = api::ReadGenerate(req);
      if (!r.ok()) return 0;
      const std::size_t n = r->prompt ? r->prompt->size() : r->prompt_ids.size();
      if (!r->prompt) (void)service::ValidatePromptIds(r->prompt_ids, Limits(), "prompt_ids");
      (void)service::ValidateGeneration(r->fields, service::Endpoint::kGenerate, {n}, Limits(), 0);
      break;
    }
    case 1: {
      v1::SummarizeRequest req;
      if (!req.ParseFromArray(msg, len)) return 0;
      auto r = api::ReadSummarize(req);
      if (r.ok())
        (void)service::ValidateGeneration(r->fields, service::Endpoint::kSummarize, {r->summary.text.size()}, Limits(),
                                          0);
      break;
    }
    default: {
      v1::AnswerRequest req;
      if (!req.ParseFromArray(msg, len)) return 0;
      auto r = api::ReadAnswer(req);
      if (r.ok()) (void)service::ValidateQa(r->fields, 512);
      v1::EmbedRequest embed;  // the same bytes as the other encoder call
      if (embed.ParseFromArray(msg, len)) (void)api::ReadEmbed(embed);
      v1::ClassifyRequest classify;
      if (classify.ParseFromArray(msg, len)) (void)api::ReadClassify(classify);
      v1::RerankRequest rerank;
      if (rerank.ParseFromArray(msg, len)) (void)api::ReadRerank(rerank);
      break;
    }
  }
  return 0;
}
