// Builds the services (server/service/) from loaded models: the generation
// service over the decoder worker server/serving/decoder_worker.h builds
// (options checked against the model, the paged KV cache sized, the
// runner), the QA and encoder services from their checkpoints. The torch
// side of serving; the services themselves are torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "server/checkpoint/dtype.h"
#include "server/common/status.h"
#include "server/engine/speculative.h"
#include "server/service/encoder_service.h"
#include "server/service/generation_service.h"
#include "server/service/qa_service.h"

namespace ropeserve {

class DecoderModel;

// Serving: the KV cache sized from options.kv_cache_memory, the engine on
// its own thread. `model` must outlive the service; `tokenizer` may be
// null (token-id prompts only).
StatusOr<std::unique_ptr<service::GenerationService>> ServeDecoder(
    const DecoderModel& model, std::string served_name, service::EngineOptions options,
    std::shared_ptr<const tok::Tokenizer> tokenizer = nullptr);

struct OfflineOptions {
  int block_size = 16;             // as EngineOptions::block_size
  std::int64_t max_model_len = 0;  // 0 = the model's max_position_embeddings
  int max_num_seqs = 64;           // the KV cache holds up to this many sequences of max_model_len
  std::int64_t max_num_batched_tokens = 2048;
  SpeculativeConfig speculative;
  std::string kv_cache_memory = "auto";  // as serve's --kv-cache-memory
  bool enforce_eager = false;            // as serve's: CUDA devices replay decode graphs unless set
};

// Offline (`ropeserve generate`, tests): the worker serve builds
// (BuildDecoderWorker: the same KV sizing, runner, padding and CUDA
// graphs, sampler), the engine stepped by the caller's thread inside
// Generate / GenerateBatch.
StatusOr<std::unique_ptr<service::GenerationService>> OfflineDecoder(
    const DecoderModel& model, OfflineOptions options = {}, std::shared_ptr<const tok::Tokenizer> tokenizer = nullptr);

// Loads a span model (config.json, model.safetensors; compute in `dtype`,
// float32 or bfloat16, on `device`: cpu, cuda or cuda:N) and its
// tokenizer.json from `dir` and serves them.
StatusOr<std::unique_ptr<service::QaService>> LoadQaService(const std::string& dir, std::string served_name,
                                                            service::QaServiceOptions options = {},
                                                            DType dtype = DType::kF32,
                                                            const std::string& device = "cpu");

// Loads an encoder for `serve --encoder` from `dir`: a base model
// (ModernBertModel, RoFormerModel, a decoder trunk: embeddings, pooled as
// its sentence-transformers metadata says: modules.json, 1_Pooling/, ...;
// server/embedding/pooling.h) or a sequence classifier (classification,
// and pair scoring for a cross-encoder of one label), and its tokenizer.json.
StatusOr<std::unique_ptr<service::EncoderService>> LoadEncoderService(const std::string& dir, std::string served_name,
                                                                      service::EncoderServiceOptions options = {},
                                                                      DType dtype = DType::kF32,
                                                                      const std::string& device = "cpu");

}  // namespace ropeserve
