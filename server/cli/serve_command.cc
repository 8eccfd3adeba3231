// `ropeserve serve`'s flags: parsed (flags, then --config's YAML file, then
// ROPESERVE_* environment variables) into one app::ServeConfig, which
// server/app/server.h runs. Nothing here builds the server.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "server/app/server.h"
#include "server/checkpoint/config_overrides.h"
#include "server/cli/commands.h"
#include "server/cli/yaml_config.h"

namespace ropeserve::cli {

namespace {

// serve's settings, and the speculative flags that become
// engine.scheduler.speculative once parsed.
struct ServeFlags : app::ServeConfig {
  SpeculativeFlags speculative;
};

void AddKvEventsFlags(CLI::App& sub, app::KvEventsConfig& f) {
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

void AddStorageFlags(CLI::App& sub, app::StorageConfig& f) {
  sub.add_option("--data-dir", f.data_dir,
                 "Directory for what survives restarts (uploaded files and batches: batch.db and files/); one "
                 "server per directory. Default: $XDG_STATE_HOME/ropeserve or ~/.local/state/ropeserve, used when "
                 "it can be (else the server runs without the Files and Batch APIs)")
      ->envname("ROPESERVE_DATA_DIR");
  sub.add_option("--max-file-bytes", f.max_file_bytes, "Largest upload to POST /v1/files")
      ->capture_default_str()
      ->envname("ROPESERVE_MAX_FILE_BYTES")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(std::size_t{1024}, std::size_t{1} << 34));
  sub.add_option("--files-max-bytes", f.files_max_bytes,
                 "Storage all files may take together, uploads and batch results (429 for an upload past it; a "
                 "batch whose results do not fit fails with storage_full)")
      ->capture_default_str()
      ->envname("ROPESERVE_FILES_MAX_BYTES")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(std::size_t{1} << 20, std::size_t{1} << 50));
  sub.add_option("--batch-max-in-flight", f.batch_max_in_flight,
                 "Batch lines running at once, at the engine's lowest priority (interactive requests are admitted "
                 "first and preempt them)")
      ->capture_default_str()
      ->envname("ROPESERVE_BATCH_MAX_IN_FLIGHT")
      ->check(CLI::Range(1, 256));
  sub.add_option("--batch-scheduling", f.batch_scheduling,
                 "gaps: batch lines run only in engine steps with no interactive request running (interactive "
                 "decode keeps its speed; a server never idle runs no batch); shared: they decode beside "
                 "interactive requests at the lowest priority (batches progress under load, interactive tokens come "
                 "slower; docs/benchmarks.md)")
      ->capture_default_str()
      ->envname("ROPESERVE_BATCH_SCHEDULING")
      ->check(CLI::IsMember({"gaps", "shared"}));
  sub.add_option("--batch-max-active", f.batch_max_active,
                 "Batches not yet finished, all keys together; POST /v1/batches past it answers 429")
      ->capture_default_str()
      ->envname("ROPESERVE_BATCH_MAX_ACTIVE")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100000}));
}

// The models served, their devices and dtypes.
void AddModelFlags(CLI::App* sub, ServeFlags* f) {
  sub->add_option("--demo", f->demo,
                  "Random-weight demo models: auto (the default: all of them when no model is named, none "
                  "when --model, --qa or --encoder is), on / 1 (also a demo decoder beside --qa / --encoder "
                  "without --model), or off / 0 (never; serve refuses to start with no model named; "
                  "deployments set this)")
      ->capture_default_str()
      ->envname("ROPESERVE_DEMO")
      ->check(CLI::IsMember({"auto", "on", "off", "1", "0"}));
  // --model is vLLM's name; --summarizer (and ROPESERVE_SUMMARIZER) the
  // earlier one, still accepted.
  sub->add_option("--model,--summarizer", f->summarizer,
                  "Decoder checkpoint directory (Hugging Face layout: config.json, *.safetensors, tokenizer.json) "
                  "for summarization and the OpenAI endpoints (default: a generated demo model when no --qa or "
                  "--encoder is given either, else none: the generation endpoints then answer 501; --summarizer "
                  "and ROPESERVE_SUMMARIZER are older names)")
      ->envname(std::getenv("ROPESERVE_MODEL") == nullptr && std::getenv("ROPESERVE_SUMMARIZER") != nullptr
                    ? "ROPESERVE_SUMMARIZER"
                    : "ROPESERVE_MODEL")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--qa", f->qa,
                  "Extractive-QA span model directory (ModernBertForQuestionAnswering, RoFormerForQuestionAnswering, "
                  "or a decoder with a span head: Llama/Mistral/Qwen2/Qwen3ForQuestionAnswering; config.json, "
                  "model.safetensors, "
                  "tokenizer.json) for /v1/qa and gRPC Answer (default: a generated demo model when --model "
                  "is not given either)")
      ->envname("ROPESERVE_QA")
      ->check(CLI::ExistingDirectory);
  // An existing directory, or NAME=DIR.
  const CLI::Validator encoder_dir(
      [](std::string& value) -> std::string {
        const app::EncoderSpec e = app::SplitEncoderSpec(value);
        if (value.find('=') == 0) return "--encoder NAME=DIR needs a NAME";
        if (e.name.find_first_of(" \t\r\n") != std::string::npos) return "a model id has no spaces: " + e.name;
        if (std::filesystem::is_directory(e.dir)) return "";
        return "Directory does not exist: " + e.dir + " (--encoder takes DIR or NAME=DIR)";
      },
      "DIR|NAME=DIR");
  sub->add_option("--encoder", f->encoders,
                  "Encoder model directory (config.json, safetensors, tokenizer.json): a sentence-embedding "
                  "model (ModernBertModel, RoFormerModel, or a decoder trunk: Llama/Mistral/Qwen2/Qwen3Model or "
                  "ForCausalLM such as Qwen3-Embedding; sentence-transformers' modules.json / 1_Pooling when "
                  "present, without them mean pooling, last token for decoders) for /v1/embeddings, TEI's /embed "
                  "and gRPC Embed, /score and /rerank; or a sequence classifier (ModernBert/RoFormer/Llama/Qwen2/"
                  "Qwen3ForSequenceClassification) for /classify, TEI's /predict and gRPC Classify, and with one "
                  "label (a cross-encoder) /score, /rerank and gRPC Rerank; or a token classifier (ModernBert/"
                  "RoFormerForTokenClassification) for /v1/token-classify and gRPC ClassifyTokens; repeatable, the "
                  "request's `model` picks one by its id: the directory's name, or NAME given as NAME=DIR "
                  "(default: a generated demo model when no --model, --qa or --encoder is given)")
      ->envname("ROPESERVE_ENCODER")
      ->check(encoder_dir);
  sub->add_option("--hf-overrides", f->hf_overrides,
                  "NAME=JSON: keys replacing those of the config.json of the --encoder named NAME, as vLLM's "
                  "--hf-overrides (e.g. a Qwen3-Reranker: rerank='{\"architectures\": "
                  "[\"Qwen3ForSequenceClassification\"], \"classifier_from_token\": [\"no\", \"yes\"], "
                  "\"is_original_qwen3_reranker\": true}'); repeatable")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            auto parsed = ParseNamedOverrides(value);
            return parsed.ok() ? "" : parsed.status().message();
          },
          "NAME=JSON"));
  sub->add_option("--served-model-name", f->served_model_name, "Model id reported by the API (default: directory name)")
      ->envname("ROPESERVE_SERVED_MODEL_NAME");
  sub->add_option("--device", f->device, kDeviceHelp)
      ->capture_default_str()
      ->envname("ROPESERVE_DEVICE")
      ->check(DeviceValidator());
  sub->add_option(
         "--dtype", f->dtype,
         "Compute dtype (auto = bfloat16 for bf16 checkpoints, else float32 on CPU workers and bfloat16 on CUDA "
         "workers)")
      ->capture_default_str()
      ->envname("ROPESERVE_DTYPE")
      ->check(CLI::IsMember(kDTypeChoices));
  sub->add_option("--quantization", f->quantization, kQuantizationHelp)
      ->capture_default_str()
      ->envname("ROPESERVE_QUANTIZATION")
      ->check(CLI::IsMember(kQuantizationChoices));
  sub->add_option("--qa-dtype", f->qa_dtype,
                  "QA model compute dtype: float32 (exact) or bfloat16 (faster on CPUs with AVX-512-BF16)")
      ->capture_default_str()
      ->envname("ROPESERVE_QA_DTYPE")
      ->check(CLI::IsMember({"float32", "f32", "bfloat16", "bf16"}));
  sub->add_option("--encoder-dtype", f->encoder_dtype,
                  "Embedding models' compute dtype: float32 (exact) or bfloat16 (faster on CPUs with AVX-512-BF16)")
      ->capture_default_str()
      ->envname("ROPESERVE_ENCODER_DTYPE")
      ->check(CLI::IsMember({"float32", "f32", "bfloat16", "bf16"}));
}

// The engine: sequence length, batching, KV cache memory, queues, scheduling.
void AddEngineFlags(CLI::App* sub, ServeFlags* f) {
  auto& e = f->engine;
  sub->add_option("--max-model-len", e.scheduler.max_model_len,
                  "Longest prompt + generation accepted (default: the model's max_position_embeddings)")
      ->envname("ROPESERVE_MAX_MODEL_LEN")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 32));
  sub->add_option("--max-num-seqs", e.scheduler.max_num_seqs, "Most sequences in one engine step")
      ->capture_default_str()
      ->envname("ROPESERVE_MAX_NUM_SEQS")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--max-num-batched-tokens", e.scheduler.max_num_batched_tokens,
                  "Token budget of one step (decodes + prefill chunks)")
      ->capture_default_str()
      ->envname("ROPESERVE_MAX_NUM_BATCHED_TOKENS")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24));
  sub->add_option("--max-prefill-tokens-while-decoding", e.scheduler.max_prefill_tokens_while_decoding,
                  "Most prompt tokens in a step that also decodes running requests: bounds their inter-token "
                  "latency (a step without decodes still prefills up to --max-num-batched-tokens; 0 = no cap)")
      ->capture_default_str()
      ->envname("ROPESERVE_MAX_PREFILL_TOKENS_WHILE_DECODING")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 24));
  sub->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", e.scheduler.enable_prefix_caching,
                "Reuse the KV cache blocks of a prompt's prefix computed before (on by default, as vLLM); "
                "--no-enable-prefix-caching computes every prompt whole (benchmarks that replay the same "
                "prompts; --kv-offload-memory and --kv-events-endpoint need it on)")
      ->capture_default_str()
      ->envname("ROPESERVE_ENABLE_PREFIX_CACHING");
  AddSpeculativeFlags(sub, f->speculative);
  sub->add_option("--qa-token-share", e.qa_token_share,
                  "Share of a step's token budget that prefill chunks leave to waiting QA windows (decodes never "
                  "wait; QA runs at least one window per step)")
      ->capture_default_str()
      ->envname("ROPESERVE_QA_TOKEN_SHARE")
      ->check(CLI::Range(0.0, 0.95));
  sub->add_option("--block-size", e.block_size, "Tokens per KV cache block")
      ->capture_default_str()
      ->envname("ROPESERVE_BLOCK_SIZE")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--kv-cache-memory", e.kv_cache_memory,
                  "KV cache budget: bytes (4G, 512M, ...), a fraction of available memory (0.25), or auto (0.25 "
                  "of the host's available memory on CPU workers, all of --gpu-memory-utilization's budget on "
                  "CUDA workers)")
      ->capture_default_str()
      ->envname("ROPESERVE_KV_CACHE_MEMORY");
  sub->add_option("--kv-offload-memory", e.kv_offload_memory,
                  "A host-memory KV tier (off by default): full blocks the prefix cache evicts are kept there "
                  "(LRU) and copied back for a request whose prefix continues there, instead of computed again "
                  "(questions over one long document between other traffic); bytes (8G, ...) or a fraction of "
                  "available memory; needs prefix caching")
      ->envname("ROPESERVE_KV_OFFLOAD_MEMORY");
  sub->add_option(
         "--kv-offload-path", e.kv_offload_path,
         "CPU workers: keep the tier of --kv-offload-memory in a file in this directory instead of "
         "memory (reserved on the disk at start, memory-mapped, its name removed at once): the page cache keeps "
         "what fits in memory, the rest is read back from the disk, so the tier may outgrow memory")
      ->envname("ROPESERVE_KV_OFFLOAD_PATH");
  sub->add_option("--gpu-memory-utilization", e.gpu_memory_utilization,
                  "CUDA workers: the share of the device's memory for weights, activations, CUDA graphs and the "
                  "KV cache; the KV cache gets what is left after the weights, a profiling forward of "
                  "--max-num-batched-tokens tokens (as vLLM) and the decode graphs' memory. Ignored on CPU workers")
      ->capture_default_str()
      ->envname("ROPESERVE_GPU_MEMORY_UTILIZATION")
      ->check(CLI::Range(0.01, 1.0));
  sub->add_flag("--enforce-eager", e.enforce_eager,
                "CUDA workers: run every step eagerly, capturing no CUDA graphs (decode steps are otherwise "
                "padded to batch buckets 1, 2, 4, 8, 16, 24, ... --max-num-seqs and replayed from graphs "
                "captured at start-up). CPU workers always run eagerly")
      ->envname("ROPESERVE_ENFORCE_EAGER");
  sub->add_option("--max-queue-requests", e.scheduler.max_waiting_requests,
                  "Waiting requests beyond which new ones get 429 / RESOURCE_EXHAUSTED")
      ->capture_default_str()
      ->envname("ROPESERVE_MAX_QUEUE_REQUESTS")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--max-queue-tokens", e.scheduler.max_waiting_tokens,
                  "Waiting prompt tokens beyond which new requests get 429 / RESOURCE_EXHAUSTED")
      ->capture_default_str()
      ->envname("ROPESERVE_MAX_QUEUE_TOKENS")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  sub->add_option("--scheduling-policy", f->scheduling_policy,
                  "fcfs: requests run in arrival order; priority: a request's `priority` (lower first) orders "
                  "admission and preemption, and any client may set it (as vLLM)")
      ->capture_default_str()
      ->envname("ROPESERVE_SCHEDULING_POLICY")
      ->check(CLI::IsMember({"fcfs", "priority"}));
}

// What one request may ask for.
void AddRequestLimitFlags(CLI::App* sub, ServeFlags* f) {
  sub->add_option("--max-body-bytes", f->max_body_bytes, "Largest accepted request body (HTTP) or message (gRPC)")
      ->capture_default_str()
      ->envname("ROPESERVE_MAX_BODY_BYTES")
      ->check(CLI::Range(std::size_t{1024}, std::size_t{1} << 30));
  sub->add_option("--max-request-tokens", f->engine.requests.max_request_tokens,
                  "Tokens one request may reserve: prompts x n x (prompt + max_tokens); 0 = the KV cache's capacity")
      ->capture_default_str()
      ->envname("ROPESERVE_MAX_REQUEST_TOKENS")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
  sub->add_option("--max-document-bytes", f->engine.requests.max_document_bytes,
                  "Longest text /v1/summarize and gRPC Summarize accept (long ones are summarized in chunks); "
                  "longer: 413 / RESOURCE_EXHAUSTED")
      ->capture_default_str()
      ->envname("ROPESERVE_MAX_DOCUMENT_BYTES")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30));
  sub->add_option("--qa-max-context-bytes", f->qa_max_context_bytes,
                  "Longest QA context accepted, in bytes (longer: 400 / INVALID_ARGUMENT)")
      ->capture_default_str()
      ->envname("ROPESERVE_QA_MAX_CONTEXT_BYTES")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30));
  sub->add_option("--qa-max-windows", f->qa_max_windows,
                  "Windows one QA request (all its question-context pairs) may need; more: 400 / INVALID_ARGUMENT")
      ->capture_default_str()
      ->envname("ROPESERVE_QA_MAX_WINDOWS")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  sub->add_option("--request-timeout", f->request_timeout,
                  "Seconds a request may take from arrival to its end, then 504 / DEADLINE_EXCEEDED (0 = none; a "
                  "shorter gRPC deadline wins)")
      ->capture_default_str()
      ->envname("ROPESERVE_REQUEST_TIMEOUT")
      ->check(CLI::Range(0.0, 1e7));
}

// Listening, connections, CORS, API keys, TLS, shutdown.
void AddNetworkFlags(CLI::App* sub, ServeFlags* f) {
  sub->add_option("--host", f->host, "Address to listen on (HTTP and gRPC)")
      ->capture_default_str()
      ->envname("ROPESERVE_HOST");
  sub->add_option("--http-port", f->http_port, "HTTP port (0 = any free port)")
      ->capture_default_str()
      ->envname("ROPESERVE_HTTP_PORT")
      ->check(CLI::Range(0, 65535));
  sub->add_option("--grpc-port", f->grpc_port, "gRPC port (-1 disables gRPC)")
      ->capture_default_str()
      ->envname("ROPESERVE_GRPC_PORT")
      ->check(CLI::Range(-1, 65535));
  sub->add_option("--admin-port", f->admin_port,
                  "Port of its own for /health, /ready and /metrics (probes and scrapes answered whatever the API "
                  "port's load; they stay on the API port too) and, without an API key, vLLM's render endpoints "
                  "(/v1/completions/render, /v1/chat/completions/render: a router's tokenizer); keep it inside "
                  "the cluster; -1 disables, 0 = any free port")
      ->capture_default_str()
      ->envname("ROPESERVE_ADMIN_PORT")
      ->check(CLI::Range(-1, 65535));
  sub->add_option("--http-max-connections", f->http_max_connections,
                  "HTTP connections served at once (each holds a thread, a streaming client for its whole stream); "
                  "one more gets 503 at once")
      ->capture_default_str()
      ->envname("ROPESERVE_HTTP_MAX_CONNECTIONS")
      ->check(CLI::Range(std::size_t{2}, std::size_t{65536}));
  sub->add_option("--http-read-timeout", f->http_read_timeout,
                  "Seconds a client has to send a whole request (head and body) once it starts; slower: 408")
      ->capture_default_str()
      ->envname("ROPESERVE_HTTP_READ_TIMEOUT")
      ->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--http-keep-alive-timeout", f->http_keep_alive_timeout,
                  "Seconds an HTTP connection may sit idle before its next request")
      ->capture_default_str()
      ->envname("ROPESERVE_HTTP_KEEP_ALIVE_TIMEOUT")
      ->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--allowed-origins", f->allowed_origins,
                  "Browser origins allowed to call the API (CORS; repeatable, or * for any); default: none, "
                  "no CORS headers")
      ->envname("ROPESERVE_ALLOWED_ORIGINS")
      ->delimiter(',');
  sub->add_option("--grpc-max-concurrent-streams", f->grpc_max_concurrent_streams,
                  "gRPC calls one connection may have open at once")
      ->capture_default_str()
      ->envname("ROPESERVE_GRPC_MAX_CONCURRENT_STREAMS")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--api-key", f->api_keys,
                  "Require 'Authorization: Bearer KEY' on /v1/* and gRPC calls (repeatable; /health, /ready and "
                  "/metrics stay open)")
      ->envname("ROPESERVE_API_KEY");
  sub->add_option("--api-key-file", f->api_key_file, "File with API keys, one per line ('#' comments)")
      ->envname("ROPESERVE_API_KEY_FILE")
      ->check(CLI::ExistingFile);
  sub->add_option("--tls-cert", f->tls_cert, "PEM certificate: serve HTTPS and gRPC over TLS (with --tls-key)")
      ->envname("ROPESERVE_TLS_CERT")
      ->check(CLI::ExistingFile);
  sub->add_option("--tls-key", f->tls_key, "PEM private key for --tls-cert")
      ->envname("ROPESERVE_TLS_KEY")
      ->check(CLI::ExistingFile);
  sub->add_option("--shutdown-timeout", f->shutdown_timeout,
                  "Seconds in-flight requests get to finish after SIGTERM/SIGINT before they are cancelled")
      ->capture_default_str()
      ->envname("ROPESERVE_SHUTDOWN_TIMEOUT")
      ->check(CLI::Range(0.0, 1e6));
}

// Log format and trace export.
void AddObservabilityFlags(CLI::App* sub, ServeFlags* f) {
  sub->add_option("--log-format", f->log_format, "text, or json (one object per line)")
      ->capture_default_str()
      ->envname("ROPESERVE_LOG_FORMAT")
      ->check(CLI::IsMember({"text", "json"}));
  sub->add_option("--otlp-traces-endpoint", f->otlp_traces_endpoint,
                  "OpenTelemetry collector URL (OTLP/HTTP, JSON), e.g. http://collector:4318/v1/traces: one span "
                  "per request with queue/prefill/decode children, batched; dropped (counted) when the collector "
                  "lags. Trace ids (W3C traceparent) are logged and returned in `traceresponse` either way")
      ->envname("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  sub->add_option("--otlp-traces-headers", f->otlp_traces_headers,
                  "Headers sent with every span export, as key=value pairs separated by commas (values "
                  "percent-encoded), e.g. a hosted collector's API key")
      ->envname("OTEL_EXPORTER_OTLP_TRACES_HEADERS");
  sub->add_option("--otlp-traces-sample-ratio", f->otlp_traces_sample_ratio,
                  "Share of new traces whose spans are exported (0-1); a client's traceparent decides for its own")
      ->capture_default_str()
      ->envname("ROPESERVE_OTLP_TRACES_SAMPLE_RATIO")
      ->check(CLI::Range(0.0, 1.0));
}

// The data directory (files, batches) and the Responses API's store.
void AddStoredStateFlags(CLI::App* sub, ServeFlags* f) {
  AddStorageFlags(*sub, f->storage);
  sub->add_option("--responses-max-stored", f->responses.max_responses,
                  "Stored responses of the Responses API kept in memory (store: true), least recently used "
                  "dropped first; lost on restart")
      ->capture_default_str()
      ->envname("ROPESERVE_RESPONSES_MAX_STORED")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10000000}));
  sub->add_option("--responses-max-bytes", f->responses.max_bytes,
                  "Memory the stored responses may take (their JSON), least recently used dropped first")
      ->capture_default_str()
      ->envname("ROPESERVE_RESPONSES_MAX_BYTES")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(std::size_t{1} << 16, std::size_t{1} << 40));
  sub->add_option("--responses-ttl", f->responses_ttl, "Seconds a stored response is kept")
      ->capture_default_str()
      ->envname("ROPESERVE_RESPONSES_TTL")
      ->check(CLI::Range(1.0, 1e8));
  sub->add_option("--responses-max-background", f->responses.max_background,
                  "Background responses (background: true) running at once; more are refused with 429")
      ->capture_default_str()
      ->envname("ROPESERVE_RESPONSES_MAX_BACKGROUND")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
}

// Publishing the prefix cache's changes for a router (llm-d).
void AddKvCacheEventFlags(CLI::App* sub, ServeFlags* f) { AddKvEventsFlags(*sub, f->kv_events); }

// Adds a group's flags to `sub`, listed under `group` in --help.
void AddFlagGroup(CLI::App* sub, ServeFlags* f, const std::string& group, void (*add)(CLI::App*, ServeFlags*)) {
  const std::size_t first = sub->get_options().size();
  add(sub, f);
  const std::vector<CLI::Option*> options = sub->get_options();
  for (std::size_t i = first; i < options.size(); ++i) options[i]->group(group);
}

}  // namespace

Runner AddServe(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* sub = app.add_subcommand(
      "serve",
      "Serve summarization (REST /v1/summarize, gRPC Summarize), extractive QA (/v1/qa, gRPC Answer), "
      "OpenAI-compatible completions and chat, Prometheus /metrics. With no model named, generated demo "
      "models with random weights; with only --qa / --encoder, those models alone. "
      "Flags may also come from a YAML file: `ropeserve serve --config FILE` (keys = flag names) "
      "or ROPESERVE_* environment variables; precedence: flags, then file, then environment.");
  sub->fallthrough();  // --threads and --config belong to the top level; accept them after `serve`
  app.config_formatter(std::make_shared<YamlConfig>("serve"));
  app.set_config("--config", "", "YAML config file for `serve` (a mapping of serve's flag names to values)");
  app.allow_config_extras(CLI::config_extras_mode::error);

  AddFlagGroup(sub, f.get(), "Models", AddModelFlags);
  AddFlagGroup(sub, f.get(), "Engine", AddEngineFlags);
  AddFlagGroup(sub, f.get(), "Request limits", AddRequestLimitFlags);
  AddFlagGroup(sub, f.get(), "Network and security", AddNetworkFlags);
  AddFlagGroup(sub, f.get(), "KV cache events (prefix-cache-aware routing)", AddKvCacheEventFlags);
  AddFlagGroup(sub, f.get(), "Logs and traces", AddObservabilityFlags);
  AddFlagGroup(sub, f.get(), "Storage and stored responses", AddStoredStateFlags);
  return [f] {
    app::ServeConfig config = *f;  // the settings, without the flags' own form
    auto speculative = SpeculativeFrom(f->speculative);
    if (!speculative.ok()) return Fail(speculative.status().message());
    config.engine.scheduler.speculative = *speculative;
    const Status served = app::RunServer(std::move(config));
    return served.ok() ? 0 : Fail(served.message());
  };
}

}  // namespace ropeserve::cli
