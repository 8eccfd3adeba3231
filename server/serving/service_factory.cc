#include "server/serving/service_factory.h"

#include <algorithm>
#include <filesystem>
#include <string>

#include "server/models/decoder.h"
#include "server/models/span_model_loader.h"
#include "server/serving/decoder_worker.h"

namespace ropeserve {

namespace {

// The generation service over the worker BuildDecoderWorker makes from
// `options` (resolved), on the engine's own thread or stepped by the caller.
StatusOr<std::unique_ptr<service::GenerationService>> DecoderService(const DecoderModel& model, std::string name,
                                                                     const service::EngineOptions& options,
                                                                     std::shared_ptr<const tok::Tokenizer> tokenizer,
                                                                     bool engine_thread) {
  RS_ASSIGN_OR_RETURN(KvCacheSize kv, SizeDecoderKvCache(model, options));
  RS_ASSIGN_OR_RETURN(DecoderWorker worker, BuildDecoderWorker(model, options, kv));
  service::GenerationServiceConfig sc;
  sc.name = std::move(name);
  sc.model = model.config();
  sc.dtype = DTypeSafetensorsName(model.dtype());
  sc.quantization = QuantizationName(model.quantization());
  sc.device = model.device().str();
  sc.engine = std::move(worker.engine);
  sc.kv = worker.kv;
  sc.kv_offload = worker.kv_offload;
  sc.execution = std::move(worker.execution);
  sc.requests = options.requests;
  sc.observer = options.observer;
  sc.engine_thread = engine_thread;
  return service::GenerationService::Create(std::move(sc), std::move(worker.executor), std::move(tokenizer));
}

}  // namespace

StatusOr<std::unique_ptr<service::GenerationService>> ServeDecoder(const DecoderModel& model, std::string served_name,
                                                                   service::EngineOptions options,
                                                                   std::shared_ptr<const tok::Tokenizer> tokenizer) {
  RS_ASSIGN_OR_RETURN(options, ResolveEngineOptions(model, std::move(options)));
  return DecoderService(model, std::move(served_name), options, std::move(tokenizer), /*engine_thread=*/true);
}

StatusOr<std::unique_ptr<service::GenerationService>> OfflineDecoder(const DecoderModel& model, OfflineOptions o,
                                                                     std::shared_ptr<const tok::Tokenizer> tokenizer) {
  service::EngineOptions options;  // checked by ResolveEngineOptions, as serve's
  options.block_size = o.block_size;
  options.scheduler.max_model_len = o.max_model_len;
  options.scheduler.max_num_seqs = o.max_num_seqs;
  options.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  options.scheduler.speculative = o.speculative;
  options.kv_cache_memory = o.kv_cache_memory;
  options.enforce_eager = o.enforce_eager;
  RS_ASSIGN_OR_RETURN(options, ResolveEngineOptions(model, std::move(options)));
  return DecoderService(model, "offline", options, std::move(tokenizer), /*engine_thread=*/false);
}

StatusOr<std::unique_ptr<service::QaService>> LoadQaService(const std::string& dir, std::string served_name,
                                                            service::QaServiceOptions options, DType dtype,
                                                            const std::string& device) {
  RS_ASSIGN_OR_RETURN(auto model, LoadSpanModel(dir, dtype, device));
  if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
    return NotFound(dir + ": a QA model needs its tokenizer.json");
  RS_ASSIGN_OR_RETURN(auto tokenizer, tok::Tokenizer::FromPath(dir));
  return service::QaService::Create(std::move(model), std::move(tokenizer), std::move(served_name), std::move(options));
}

StatusOr<std::unique_ptr<service::EncoderService>> LoadEncoderService(const std::string& dir, std::string served_name,
                                                                      service::EncoderServiceOptions options,
                                                                      DType dtype, const std::string& device) {
  // The metadata first: an unsupported pooling fails before the weights load.
  RS_ASSIGN_OR_RETURN(embedding::EmbeddingConfig pooling, embedding::LoadEmbeddingConfig(dir));
  RS_ASSIGN_OR_RETURN(auto model, LoadSpanModel(dir, dtype, device));
  // Without sentence-transformers' metadata, a decoder trunk pools its last
  // token (what causal embedders such as Qwen3-Embedding use); encoders the mean.
  if (pooling.source == "default" && model->config().family == EncoderFamily::kDecoder)
    pooling.pooling = embedding::Pooling::kLastToken;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
    return NotFound(dir + ": an encoder needs its tokenizer.json");
  RS_ASSIGN_OR_RETURN(auto tokenizer, tok::Tokenizer::FromPath(dir));
  return service::EncoderService::Create(std::move(model), std::move(tokenizer), std::move(served_name),
                                         std::move(pooling), std::move(options));
}

}  // namespace ropeserve
