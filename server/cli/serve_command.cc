// `ropeserve serve`: the server. Start-up order: HTTP and gRPC listen first
// (/health answers, /ready is 503 and gRPC health NOT_SERVING while the
// model loads), then the model, tokenizer and engine load and the server
// turns ready. SIGTERM/SIGINT drains: not ready, new work refused (503 /
// UNAVAILABLE), in-flight requests finish within --shutdown-timeout, exit 0.
// A second signal exits at once.
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/api/api_keys.h"
#include "server/api/grpc/grpc_service.h"
#include "server/api/http/http_server.h"
#include "server/api/observability/logging.h"
#include "server/api/observability/metrics.h"
#include "server/api/serving_context.h"
#include "server/api/work_pool.h"
#include "server/checkpoint/config_overrides.h"
#include "server/cli/commands.h"
#include "server/cli/serve_models.h"
#include "server/cli/serve_storage.h"
#include "server/cli/stop_signal.h"
#include "server/cli/yaml_config.h"
#include "server/serving/service_factory.h"

namespace ropeserve::cli {

namespace {

// The span exporter of --otlp-traces-endpoint (none without one).
StatusOr<std::unique_ptr<api::OtlpExporter>> StartSpanExporter(const ServeFlags& f) {
  auto otlp_headers = api::ParseOtlpHeaders(f.otlp_traces_headers);
  if (!otlp_headers.ok()) return InvalidArgument("--otlp-traces-headers: " + otlp_headers.status().message());
  if (f.otlp_traces_endpoint.empty()) return std::unique_ptr<api::OtlpExporter>();
  api::OtlpExporterOptions eo;
  eo.endpoint = f.otlp_traces_endpoint;
  if (const char* name = std::getenv("OTEL_SERVICE_NAME"); name != nullptr && *name) eo.service_name = name;
  eo.headers = std::move(*otlp_headers);
  RS_ASSIGN_OR_RETURN(auto exporter, api::OtlpExporter::Start(eo));
  spdlog::info("exporting trace spans (OTLP/HTTP JSON) to {}", f.otlp_traces_endpoint);
  return exporter;
}

api::HttpServerOptions HttpOptions(const ServeFlags& f) {
  api::HttpServerOptions ho;
  ho.host = f.host;
  ho.port = f.http_port;
  ho.max_body_bytes = f.max_body_bytes;
  ho.max_file_bytes = f.storage.max_file_bytes;
  ho.limits.max_connections = f.http_max_connections;
  ho.limits.request_read_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(f.http_read_timeout * 1000));
  ho.limits.keep_alive_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(f.http_keep_alive_timeout * 1000));
  ho.tls_cert = f.tls_cert;
  ho.tls_key = f.tls_key;
  ho.allowed_origins = f.allowed_origins;
  return ho;
}

// The admin port's: the API port's, with few connections, a short read
// timeout and no CORS (probes and scrapes only).
api::HttpServerOptions AdminOptions(const ServeFlags& f) {
  api::HttpServerOptions ao = HttpOptions(f);
  ao.port = f.admin_port;
  ao.admin = true;
  ao.allowed_origins.clear();
  ao.limits.max_connections = 32;
  ao.limits.request_read_timeout = std::chrono::seconds(10);
  return ao;
}

api::GrpcServerOptions GrpcOptions(const ServeFlags& f) {
  api::GrpcServerOptions go;
  go.host = f.host;
  go.port = f.grpc_port;
  go.max_message_bytes = f.max_body_bytes;
  go.max_concurrent_streams = f.grpc_max_concurrent_streams;
  go.memory_quota_bytes = std::max<std::size_t>(64 << 20, 256 * f.max_body_bytes);
  go.tls_cert = f.tls_cert;
  go.tls_key = f.tls_key;
  return go;
}

int Run(ServeFlags f) {
  if (Status s = api::ConfigureLogging(f.log_format); !s.ok()) return Fail(s.message());
#ifndef ROPESERVE_HAVE_CUDA
  if (f.device != "cpu")
    return Fail("--device " + f.device + ": this build has CPU workers only (its LibTorch has no CUDA)");
#endif
  if (f.tls_cert.empty() != f.tls_key.empty()) return Fail("--tls-cert and --tls-key go together");
  if (!(f.request_timeout >= 0) || !(f.shutdown_timeout >= 0)) return Fail("timeouts must not be negative");
  // A deployment that forgot its model must not answer 200 with noise.
  if ((f.demo == "off" || f.demo == "0") && f.summarizer.empty() && f.qa.empty() && f.encoders.empty())
    return Fail(
        "no model to serve: pass --model DIR (ROPESERVE_MODEL), --qa DIR or --encoder DIR, or --demo on "
        "(ROPESERVE_DEMO=1) for the random-weight demo models");

  api::ServingContext ctx;
  f.responses.ttl = std::chrono::seconds(static_cast<std::int64_t>(f.responses_ttl));
  ctx.responses = std::make_unique<api::ResponseStore>(f.responses);
  // The data directory (what survives restarts: files and batches).
  auto storage = Storage::Open(f.storage);
  if (!storage.ok()) return Fail(storage.status().message());
  (*storage)->Attach(ctx);
  if (f.storage.batch_scheduling == "gaps") f.engine.scheduler.background_priority = service::kBatchPriority;
  auto speculative = SpeculativeFrom(f.speculative);
  if (!speculative.ok()) return Fail(speculative.status().message());
  f.engine.scheduler.speculative = *speculative;
  auto keys = api::ApiKeys::Load(f.api_keys, f.api_key_file);
  if (!keys.ok()) return Fail(keys.status().message());
  ctx.api_keys = std::move(*keys);
  if (ctx.api_keys.enabled()) spdlog::info("API keys required on /v1/* and gRPC Inference calls");
  // KV cache events: started before the engine, which publishes to it.
  auto kv_publisher = StartKvEvents(f.kv_events, f.device == "cpu" ? "CPU" : "GPU", f.engine);
  if (!kv_publisher.ok()) return Fail(kv_publisher.status().message());
  ctx.kv_events = *kv_publisher != nullptr;
  api::ServerMetrics metrics;
  ctx.metrics = &metrics;
  if (kv_events::ZmqPublisher* p = kv_publisher->get(); p != nullptr)
    metrics.AttachKvEvents([p] { return std::make_pair(p->published(), p->dropped()); });
  ctx.request_timeout_seconds = f.request_timeout;

  // SIGTERM / SIGINT start the drain; a second one exits at once.
  StopSignal stop;
  if (Status installed = stop.Install(); !installed.ok()) return Fail(installed.message());

  // Tracing: ids always; spans exported only to a collector.
  auto exporter = StartSpanExporter(f);
  if (!exporter.ok()) return Fail(exporter.status().message());
  api::Tracer tracer(std::move(*exporter), f.otlp_traces_sample_ratio);
  ctx.tracer = &tracer;
  metrics.AttachTracer(&tracer);
  api::ObserverFanOut observers({&metrics, &tracer});

  // gRPC's request preparation and QA answer selection (server/api/work_pool.h).
  ctx.work_pool = std::make_shared<api::WorkPool>(4, static_cast<std::size_t>(f.engine.scheduler.max_waiting_requests));

  // Listen first, so that probes answer while the model loads.
  api::HttpServer http(HttpOptions(f), ctx);
  if (Status s = http.Bind(); !s.ok()) return Fail(s.message());
  // The admin port: probes and metrics with connections of their own.
  std::optional<api::HttpServer> admin;
  if (f.admin_port >= 0) {
    admin.emplace(AdminOptions(f), ctx);
    if (Status s = admin->Bind(); !s.ok()) return Fail("--admin-port: " + s.message());
  }
  api::GrpcServer grpc_server(ctx);
  if (f.grpc_port >= 0) {
    if (Status s = grpc_server.Start(GrpcOptions(f)); !s.ok()) return Fail(s.message());
  }
  Status http_status, admin_status;
  std::thread http_thread([&] {
    http_status = http.Serve();
    if (!http_status.ok()) stop.Request();
  });
  std::thread admin_thread([&] {
    if (!admin) return;
    admin_status = admin->Serve();
    if (!admin_status.ok()) stop.Request();
  });
  auto stop_http = [&] {
    http.Stop();
    http_thread.join();
    if (admin) admin->Stop();
    admin_thread.join();
  };

  auto loaded = LoadServeModels(f, metrics, observers, ctx.work_pool);
  if (!loaded.ok()) {
    stop_http();
    grpc_server.Stop();
    return Fail(loaded.status().ToString());
  }
  service::GenerationService* service = loaded->service.get();  // null: encoders / QA only
  if (service != nullptr) {
    api::ServedModelInfo served;
    served.name = service->name();
    served.qa_name = loaded->qa ? loaded->qa->name() : "";
    served.block_size = service->block_size();
    served.num_blocks = static_cast<int>(service->kv_cache().num_blocks);
    served.max_model_len = service->max_model_len();
    served.num_speculative_tokens = f.engine.scheduler.speculative.num_tokens;
    metrics.SetModel(served);
    metrics.Attach(&service->engine());
  }
  if (loaded->qa) metrics.AddQaModel(loaded->qa->name());
  ctx.service = service;
  ctx.no_generation = service == nullptr;
  ctx.qa = loaded->qa.get();
  ctx.encoders = &loaded->encoder_list;
  ctx.lifecycle.SetReady();
  grpc_server.SetServing(true);
  // Batch lines call the generation endpoints: without a decoder they stay
  // pending for a server that has one.
  if (service != nullptr) (*storage)->StartBatches(ctx);
  spdlog::info("ready");

  while (!stop.Wait(std::chrono::seconds(3600))) {
  }

  // Drain: not ready, refuse new work, let admitted requests finish.
  ctx.lifecycle.StartDraining();
  grpc_server.SetServing(false);
  // Running batch lines are cancelled, not drained: they stay pending and
  // run again at the next start.
  (*storage)->StopBatches();
  const auto grace = std::chrono::milliseconds(static_cast<std::int64_t>(f.shutdown_timeout * 1000));
  spdlog::info("draining {} in-flight requests (up to {} s)", ctx.lifecycle.in_flight(), f.shutdown_timeout);
  const bool drained = ctx.lifecycle.WaitIdle(grace);
  if (!drained)
    spdlog::warn("{} requests still running after --shutdown-timeout: cancelling them", ctx.lifecycle.in_flight());
  // Stopping the engine ends every remaining stream (their clients get an
  // error), then the front ends close.
  if (service != nullptr) service->engine().Stop();
  ctx.responses->Shutdown();  // background responses end with the engine
  grpc_server.Stop(std::chrono::milliseconds(drained ? 0 : 1000));
  ctx.lifecycle.WaitIdle(std::chrono::seconds(2));
  stop_http();
  ctx.service = nullptr;
  ctx.no_generation = false;
  ctx.qa = nullptr;
  ctx.encoders = nullptr;
  metrics.Attach(nullptr);
  if (!http_status.ok()) return Fail(http_status.ToString());
  if (!admin_status.ok()) return Fail("admin port: " + admin_status.ToString());
  spdlog::info("stopped");
  return 0;
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
        const EncoderFlag e = SplitEncoderFlag(value);
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
  sub->add_option("--max-request-tokens", f->engine.max_request_tokens,
                  "Tokens one request may reserve: prompts x n x (prompt + max_tokens); 0 = the KV cache's capacity")
      ->capture_default_str()
      ->envname("ROPESERVE_MAX_REQUEST_TOKENS")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
  sub->add_option("--max-document-bytes", f->engine.max_document_bytes,
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
  return [f] { return Run(*f); };
}

}  // namespace ropeserve::cli
