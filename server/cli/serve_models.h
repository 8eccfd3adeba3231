// `ropeserve serve`'s flags and its models: what serve_command.cc parses
// (ServeFlags) and what serve_models.cc loads from it (LoadServeModels):
// the summarization decoder and its engine, the QA model, the encoders,
// and the random-weight demo models when no model is named.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/api/observability/metrics.h"
#include "server/api/rest/response_store.h"
#include "server/api/work_pool.h"
#include "server/cli/commands.h"
#include "server/cli/serve_kv_events.h"
#include "server/cli/serve_storage.h"
#include "server/engine/engine.h"
#include "server/models/decoder.h"
#include "server/serving/service_factory.h"

namespace ropeserve::cli {

// --encoder's value: DIR (named after the directory), or NAME=DIR when it is
// not a directory itself (a directory's name may hold '=').
struct EncoderFlag {
  std::string name;  // empty: the directory's name
  std::string dir;
};
EncoderFlag SplitEncoderFlag(const std::string& value);

struct ServeFlags {
  SpeculativeFlags speculative;
  std::string summarizer;
  std::string qa;
  std::string demo = "auto";  // auto | on | off (1 / 0): random-weight demo models when no model is named
  std::size_t qa_max_context_bytes = 1 << 20;
  std::string qa_dtype = "float32";
  std::vector<std::string> encoders;      // --encoder: embedding models and classifiers
  std::vector<std::string> hf_overrides;  // --hf-overrides NAME=JSON, per encoder
  std::string encoder_dtype = "float32";
  std::string served_model_name;
  std::string host = "0.0.0.0";
  int http_port = 8080;
  int grpc_port = 50051;
  std::string device = "cpu";
  std::string dtype = "auto";
  std::string quantization = "none";
  std::size_t max_body_bytes = 1 << 20;
  int admin_port = 8081;
  std::size_t http_max_connections = 512;
  double http_read_timeout = 30;
  double http_keep_alive_timeout = 5;
  std::vector<std::string> allowed_origins;
  int grpc_max_concurrent_streams = 128;
  std::size_t qa_max_windows = 2048;
  std::string scheduling_policy = "fcfs";
  std::vector<std::string> api_keys;
  std::string api_key_file;
  std::string tls_cert;
  std::string tls_key;
  double request_timeout = 0;
  double shutdown_timeout = 30;
  std::string log_format = "text";
  std::string otlp_traces_endpoint;  // "" = spans are not exported
  std::string otlp_traces_headers;   // "k=v,k2=v2"
  double otlp_traces_sample_ratio = 1.0;
  api::ResponseStoreOptions responses;
  StorageFlags storage;              // --data-dir, --max-file-bytes, --batch-*
  double responses_ttl = 24 * 3600;  // seconds
  service::EngineOptions engine;
  KvEventsFlags kv_events;  // --kv-events-*, --prefix-caching-hash-*
};

// Whether serve loads the random-weight demo decoder: no --model, and
// either --demo on, or --demo auto with no --qa and no --encoder either
// (`serve --encoder DIR` alone serves that encoder only).
bool ServesDemoDecoder(const ServeFlags& f);

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
StatusOr<Loaded> LoadServeModels(ServeFlags& f, api::ServerMetrics& metrics, EngineObserver& observer,
                                 const std::shared_ptr<api::WorkPool>& work_pool);

}  // namespace ropeserve::cli
