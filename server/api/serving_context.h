// What the REST and gRPC front ends share: the lifecycle (ready/draining),
// API keys, metrics, the request timeout, the model service, which is null
// while the model loads (requests then get 503 / UNAVAILABLE) and when no
// generation model is served (501 / UNIMPLEMENTED), and the QA and
// embedding services when such models are served.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "server/api/api_keys.h"
#include "server/api/lifecycle.h"
#include "server/api/observability/metrics.h"
#include "server/api/observability/tracing.h"
#include "server/api/rest/response_store.h"
#include "server/common/status.h"

namespace ropeserve::service {
class GenerationService;  // server/service/generation_service.h
class QaService;          // server/service/qa_service.h
class EncoderService;     // server/service/encoder_service.h
}  // namespace ropeserve::service

namespace ropeserve::batch {
class FileStore;    // server/batch/file_store.h
class BatchStore;   // server/batch/batch_store.h
class BatchRunner;  // server/batch/batch_runner.h
}  // namespace ropeserve::batch

namespace ropeserve::api {

class WorkPool;

struct ServingContext {
  Lifecycle lifecycle;
  ApiKeys api_keys;
  ServerMetrics* metrics = nullptr;    // null: not exported
  Tracer* tracer = nullptr;            // null: trace ids only, no spans
  double request_timeout_seconds = 0;  // 0 = none; a shorter client deadline wins
  // serve --kv-events-endpoint: the prefix cache's hashes are published,
  // and GET /debug/kv-cache lists them.
  bool kv_events = false;
  std::atomic<service::GenerationService*> service{nullptr};
  // Set with the models when none of them generates (serve --encoder or
  // --qa alone): the generation endpoints then answer 501, not 503.
  std::atomic<bool> no_generation{false};
  // Unavailable (503) while the models load.
  Status Loaded() const {
    if (service.load() == nullptr && !no_generation.load())
      return Unavailable("the server is still loading its models");
    return Status::Ok();
  }
  // The generation service; Unavailable (503) while the models load,
  // Unimplemented (501) when the server has no generation model.
  StatusOr<service::GenerationService*> LoadedService() const {
    RS_RETURN_IF_ERROR(Loaded());
    service::GenerationService* s = service.load();
    if (s == nullptr)
      return Unimplemented("this server serves no generation model (serve --model DIR); see GET /v1/models");
    return s;
  }
  std::atomic<service::QaService*> qa{nullptr};  // null: no QA model (501 / UNIMPLEMENTED)
  // The embedding models (serve --encoder), in the flags' order; null or
  // empty: none (501 / UNIMPLEMENTED).
  std::atomic<const std::vector<service::EncoderService*>*> encoders{nullptr};
  // Where the gRPC front end prepares requests and selects QA answers
  // (server/api/work_pool.h); the gRPC server makes one when this is null.
  std::shared_ptr<WorkPool> work_pool;
  // The Responses API's stored responses and background runs. Shut down
  // (its runs cancelled and joined) before the service goes away.
  std::unique_ptr<ResponseStore> responses = std::make_unique<ResponseStore>();
  // The Files API's store in the data directory (null: none; the Files
  // routes answer 400 naming --data-dir).
  batch::FileStore* files = nullptr;
  // The Batch API's batches in the same directory, and their runner (its
  // running lines for /metrics). Null: none.
  batch::BatchStore* batches = nullptr;
  batch::BatchRunner* batch_runner = nullptr;
};

}  // namespace ropeserve::api
