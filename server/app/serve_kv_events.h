// serve's KV cache events settings (the flags --kv-events-*, vLLM's
// --kv-events-config, --prefix-caching-hash-algo; parsed in
// server/cli/serve_command.cc) and the publisher they start
// (server/kv_events/zmq_publisher.h).
#pragma once

#include <memory>
#include <string>

#include "server/common/status.h"
#include "server/kv_events/zmq_publisher.h"
#include "server/service/generation_service.h"

namespace ropeserve::app {

struct KvEventsConfig {
  std::string endpoint;         // "" = no events
  std::string replay_endpoint;  // "" = no replay socket
  std::string topic;
  std::size_t buffer_steps = 10000;
  int hwm = 100000;
  std::size_t max_queue_size = 100000;
  std::string config_json;  // --kv-events-config: vLLM's KVEventsConfig as JSON
  std::string hash_algo = "auto";
  std::string hash_seed;  // PYTHONHASHSEED, as vLLM
};

// Chooses the prefix cache's block hash (engine.block_hasher) and, with an
// endpoint, starts the publisher and points engine.kv_events at it (null
// without one). `medium` is what the events call the pool ("GPU", "CPU").
StatusOr<std::unique_ptr<kv_events::ZmqPublisher>> StartKvEvents(KvEventsConfig& f, const std::string& medium,
                                                                 service::EngineOptions& engine);

}  // namespace ropeserve::app
