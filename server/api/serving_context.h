// What the REST and gRPC front ends share: the lifecycle (ready/draining),
// API keys, metrics, the request timeout, the model service, which is null
// while the model loads (requests then get 503 / UNAVAILABLE), and the QA
// service when a QA model is served.
#pragma once

#include <atomic>

#include "server/api/api_keys.h"
#include "server/api/lifecycle.h"
#include "server/api/metrics.h"

namespace ropeserve {
class QaService;  // server/runner/qa_service.h
}

namespace ropeserve::api {

class ModelService;

struct ServingContext {
  Lifecycle lifecycle;
  ApiKeys api_keys;
  ServerMetrics* metrics = nullptr;  // null: not exported
  double request_timeout_seconds = 0;  // 0 = none; a shorter client deadline wins
  std::atomic<ModelService*> service{nullptr};
  std::atomic<QaService*> qa{nullptr};  // null: no QA model (501 / UNIMPLEMENTED)
};

}  // namespace ropeserve::api
