// Builds the generation service (server/service/generation_service.h) for
// a decoder checkpoint: validates the engine options against the model,
// sizes the paged KV cache, and hands the service a ModelRunner over the
// model. The torch side of serving; the service itself is torch-free.
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

// The context a captured decode graph attends up to per sequence: the
// block tables' capacity (max_position_embeddings in whole blocks).
std::int64_t GraphContext(const DecoderModel& model, std::int64_t block_size);

// The bytes a CUDA worker's KV cache may take, as vLLM's
// --gpu-memory-utilization: `utilization` of the device's memory minus what
// is in use after the weights and one profiling forward of `profile_tokens`
// tokens (the step's largest prefill; its activation peak stays reserved by
// the caching allocator), and minus what the decode CUDA graphs will hold
// when `graph_seqs` > 0 (their largest bucket): a decode forward of that
// many sequences is profiled as a graph runs it (attention workspace sized
// for `graph_context` tokens per sequence), and its activation peak plus
// the graphs' shared logits buffer is set aside (the graphs' memory pool
// is apart from the eager steps'). An error with the numbers when nothing
// is left.
StatusOr<std::int64_t> DeviceKvBudget(const DecoderModel& model, std::int64_t profile_tokens, std::int64_t block_size,
                                      double utilization, std::int64_t graph_seqs = 0, std::int64_t graph_context = 0);

struct OfflineOptions {
  std::int64_t block_size = 16;
  std::int64_t max_model_len = 0;  // 0 = the model's max_position_embeddings
  int max_num_seqs = 64;           // the KV cache holds this many sequences of max_model_len
  std::int64_t max_num_batched_tokens = 2048;
  SpeculativeConfig speculative;
};

// Offline (`ropeserve generate`, tests): the same scheduler, runner and
// sampler as serving, the engine stepped by the caller's thread inside
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
