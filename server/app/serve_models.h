// `ropeserve serve`'s flags and its models: what serve_command.cc parses
// (ServeConfig) and what serve_models.cc loads from it (LoadServeModels):
// the summarization decoder and its engine, the QA model, the encoders,
// and the random-weight demo models when no model is named.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/api/observability/metrics.h"
#include "server/api/rest/response_store.h"
#include "server/api/work_pool.h"
#include "server/app/serve_config.h"
#include "server/engine/engine.h"
#include "server/models/decoder.h"
#include "server/serving/service_factory.h"

namespace ropeserve::app {

// The models serve loads, in the order they must stop.
struct Loaded {
  std::unique_ptr<DecoderModel> model;                  // null without a decoder
  std::unique_ptr<service::GenerationService> service;  // null without a decoder
  std::unique_ptr<service::QaService> qa;               // null without a QA model
  // After the service: they leave its engine before it stops.
  std::vector<std::unique_ptr<service::EncoderService>> encoders;
  std::vector<service::EncoderService*> encoder_list;  // what ServingContext points at
};

// Loads the summarization model and its tokenizer and starts the engine,
// then the QA model and the encoders on it (without a decoder, on worker
// threads of their own); fills in the demo models' paths and served names
// it chose.
StatusOr<Loaded> LoadServeModels(ServeConfig& f, api::ServerMetrics& metrics, EngineObserver& observer,
                                 const std::shared_ptr<api::WorkPool>& work_pool);

}  // namespace ropeserve::app
