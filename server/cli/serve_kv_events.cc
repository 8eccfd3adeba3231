#include "server/cli/serve_kv_events.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/kv_events/vllm_block_hash.h"

namespace ropeserve::cli {

namespace {

// vLLM's --kv-events-config (its KVEventsConfig as JSON) onto the flags, so
// that a deployment written for vLLM (llm-d's charts) works unchanged.
Status ApplyVllmConfig(KvEventsFlags& f) {
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

void AddKvEventsFlags(CLI::App& sub, KvEventsFlags& f) {
  sub.add_option("--kv-events-endpoint", f.endpoint,
                 "Publish the prefix cache's changes (KV cache events: BlockStored, BlockRemoved, "
                 "AllBlocksCleared, msgpack-encoded as vLLM's) on a ZeroMQ PUB socket here, for a router's "
                 "prefix-cache scorer (llm-d). Bound when it holds '*' or '::' or is ipc://, else connected: "
                 "tcp://*:5557, or tcp://ROUTER:5557. Off by default")
      ->envname("ROPESERVE_KV_EVENTS_ENDPOINT");
  sub.add_option("--kv-events-replay-endpoint", f.replay_endpoint,
                 "A ZeroMQ ROUTER socket (bound) where a subscriber that missed batches asks for them again "
                 "from a sequence number, e.g. tcp://*:5558")
      ->envname("ROPESERVE_KV_EVENTS_REPLAY_ENDPOINT");
  sub.add_option("--kv-events-topic", f.topic,
                 "The topic frame before each batch; llm-d's router subscribes to \"kv@\" and reads kv@POD@MODEL "
                 "(the pod's address and the served model name)")
      ->envname("ROPESERVE_KV_EVENTS_TOPIC");
  sub.add_option("--kv-events-buffer-steps", f.buffer_steps, "Batches kept for replay")
      ->capture_default_str()
      ->envname("ROPESERVE_KV_EVENTS_BUFFER_STEPS")
      ->check(CLI::Range(std::size_t{0}, std::size_t{10000000}));
  sub.add_option("--kv-events-config", f.config_json,
                 "vLLM's form, as JSON: {\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": "
                 "..., \"replay_endpoint\": ..., \"topic\": ..., \"buffer_steps\": ..., \"hwm\": ..., "
                 "\"max_queue_size\": ...}")
      ->envname("ROPESERVE_KV_EVENTS_CONFIG");
  sub.add_option("--prefix-caching-hash-algo", f.hash_algo,
                 "How the prefix cache hashes a block of tokens: xxh3 (fast), sha256_cbor (vLLM's and llm-d's: "
                 "a router that hashes prompts finds our blocks), or auto (sha256_cbor with KV cache events, "
                 "else xxh3)")
      ->capture_default_str()
      ->envname("ROPESERVE_PREFIX_CACHING_HASH_ALGO")
      ->check(CLI::IsMember({"auto", "xxh3", "sha256_cbor"}));
  sub.add_option("--prefix-caching-hash-seed", f.hash_seed,
                 "sha256_cbor's seed (the root of every prompt's chain): vLLM's PYTHONHASHSEED, llm-d's "
                 "HashSeed; replicas and the router must agree")
      ->envname("PYTHONHASHSEED");
}

StatusOr<std::unique_ptr<kv_events::ZmqPublisher>> StartKvEvents(KvEventsFlags& f, const std::string& medium,
                                                                 service::EngineOptions& engine) {
  if (!f.config_json.empty()) RS_RETURN_IF_ERROR(ApplyVllmConfig(f));
  const bool events = !f.endpoint.empty();
  if (!events && !f.replay_endpoint.empty())
    return InvalidArgument("--kv-events-replay-endpoint needs --kv-events-endpoint");
  const std::string algo = f.hash_algo == "auto" ? (events ? "sha256_cbor" : "xxh3") : f.hash_algo;
  if (algo == "sha256_cbor") engine.block_hasher = kv_events::VllmBlockHasher(f.hash_seed);
  if (!events) return std::unique_ptr<kv_events::ZmqPublisher>();
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

}  // namespace ropeserve::cli
