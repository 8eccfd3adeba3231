// What `ropeserve serve` runs from: one struct of every setting (the CLI
// parses its flags, YAML file and environment into it:
// server/cli/serve_command.cc), checked once by ValidateServeConfig before
// anything starts. The server (server.h), its models (serve_models.h), its
// data directory (serve_storage.h) and its KV events (serve_kv_events.h)
// are built from it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "server/api/rest/response_store.h"
#include "server/app/serve_kv_events.h"
#include "server/app/serve_storage.h"
#include "server/common/status.h"
#include "server/service/generation_service.h"

namespace ropeserve::app {

// --encoder's value: DIR (named after the directory), or NAME=DIR when it is
// not a directory itself (a directory's name may hold '=').
struct EncoderSpec {
  std::string name;  // empty: the directory's name
  std::string dir;
};
EncoderSpec SplitEncoderSpec(const std::string& value);

struct ServeConfig {
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
  StorageConfig storage;             // --data-dir, --max-file-bytes, --batch-*
  double responses_ttl = 24 * 3600;  // seconds
  service::EngineOptions engine;     // scheduler.speculative included
  KvEventsConfig kv_events;          // --kv-events-*, --prefix-caching-hash-*
};

// Whether serve loads the random-weight demo decoder: no --model, and
// either --demo on, or --demo auto with no --qa and no --encoder either
// (`serve --encoder DIR` alone serves that encoder only).
bool ServesDemoDecoder(const ServeConfig& f);

// What no flag check can see alone: pairs that go together, a device this
// build cannot drive, a deployment with no model at all.
Status ValidateServeConfig(const ServeConfig& c);

}  // namespace ropeserve::app
