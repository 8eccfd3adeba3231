#include "server/app/serve_kv_events.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/kv_events/vllm_block_hash.h"

namespace ropeserve::app {

namespace {

// vLLM's --kv-events-config (its KVEventsConfig as JSON) onto the flags, so
// that a deployment written for vLLM (llm-d's charts) works unchanged.
Status ApplyVllmConfig(KvEventsConfig& f) {
  const nlohmann::json c = nlohmann::json::parse(f.config_json, nullptr, /*allow_exceptions=*/false);
  if (!c.is_object()) return InvalidArgument("--kv-events-config: not a JSON object");
  bool enabled = false;
  std::string publisher = "zmq", endpoint = "tcp://*:5557";
  for (const auto& [key, value] : c.items()) {
    auto want = [&](bool ok, const char* type) {
      return ok ? Status::Ok() : InvalidArgument("--kv-events-config: `" + key + "` must be " + type);
    };
    Status s;
    if (key == "enable_kv_cache_events") {
      if ((s = want(value.is_boolean(), "true or false")).ok()) enabled = value.get<bool>();
    } else if (key == "publisher") {
      s = want(value.is_string() && (value == "zmq" || value == "null"), "\"zmq\" or \"null\"");
      if (s.ok()) publisher = value.get<std::string>();
    } else if (key == "endpoint" || key == "topic") {
      if ((s = want(value.is_string(), "a string")).ok())
        (key == "endpoint" ? endpoint : f.topic) = value.get<std::string>();
    } else if (key == "replay_endpoint") {
      if ((s = want(value.is_string() || value.is_null(), "a string or null")).ok())
        f.replay_endpoint = value.is_null() ? "" : value.get<std::string>();
    } else if (key == "buffer_steps" || key == "max_queue_size" || key == "hwm") {
      s = want(value.is_number_unsigned() && value.get<std::uint64_t>() <= 10000000, "an integer in [0, 1e7]");
      if (s.ok() && key == "hwm") f.hwm = value.get<int>();
      if (s.ok() && key != "hwm")
        (key == "buffer_steps" ? f.buffer_steps : f.max_queue_size) = value.get<std::size_t>();
    } else {
      s = InvalidArgument("--kv-events-config: unknown key `" + key +
                          "` (known: enable_kv_cache_events, publisher, endpoint, replay_endpoint, buffer_steps, "
                          "hwm, max_queue_size, topic)");
    }
    if (!s.ok()) return s;
  }
  if (enabled && publisher == "zmq" && f.endpoint.empty()) f.endpoint = endpoint;
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<kv_events::ZmqPublisher>> StartKvEvents(KvEventsConfig& f, const std::string& medium,
                                                                 service::EngineOptions& engine) {
  if (!f.config_json.empty()) RS_RETURN_IF_ERROR(ApplyVllmConfig(f));
  const bool events = !f.endpoint.empty();
  if (!events && !f.replay_endpoint.empty())
    return InvalidArgument("--kv-events-replay-endpoint needs --kv-events-endpoint");
  const std::string algo = f.hash_algo == "auto" ? (events ? "sha256_cbor" : "xxh3") : f.hash_algo;
  if (algo == "sha256_cbor") engine.block_hasher = kv_events::VllmBlockHasher(f.hash_seed);
  if (!events) return std::unique_ptr<kv_events::ZmqPublisher>();
  if (!engine.scheduler.enable_prefix_caching)
    return InvalidArgument(
        "--kv-events-endpoint publishes the prefix cache's changes: it needs prefix caching (drop "
        "--no-enable-prefix-caching)");
  kv_events::PublisherOptions o;
  o.endpoint = f.endpoint;
  o.replay_endpoint = f.replay_endpoint;
  o.topic = f.topic;
  o.buffer_batches = f.buffer_steps;
  o.max_queue_batches = std::max<std::size_t>(1, f.max_queue_size);
  o.send_high_water_mark = f.hwm;
  o.format.block_size = engine.block_size;
  o.format.medium = medium;
  o.format.offload_medium = medium == "CPU" ? "CPU_TIER" : "CPU";
  RS_ASSIGN_OR_RETURN(auto publisher, kv_events::ZmqPublisher::Start(o));
  engine.kv_events = publisher.get();
  spdlog::info(
      "KV cache events: {} on {}{}{}, block hashes {}{}", kv_events::BindsEndpoint(o.endpoint) ? "bound" : "connected",
      o.endpoint, o.topic.empty() ? "" : ", topic " + o.topic,
      o.replay_endpoint.empty() ? "" : ", replay on " + o.replay_endpoint, algo,
      algo == "sha256_cbor" && f.hash_seed.empty() ? " (seed \"\": set PYTHONHASHSEED as the router's HashSeed)" : "");
  return publisher;
}

}  // namespace ropeserve::app
