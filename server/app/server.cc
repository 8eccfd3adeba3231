#include "server/app/server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "server/api/api_keys.h"
#include "server/api/grpc/grpc_service.h"
#include "server/api/http/http_server.h"
#include "server/api/observability/logging.h"
#include "server/api/observability/metrics.h"
#include "server/api/observability/otlp_exporter.h"
#include "server/api/observability/tracing.h"
#include "server/api/serving_context.h"
#include "server/api/work_pool.h"
#include "server/app/serve_models.h"
#include "server/app/serve_storage.h"
#include "server/app/stop_signal.h"

namespace ropeserve::app {

Status ValidateServeConfig(const ServeConfig& c) {
#ifndef ROPESERVE_HAVE_CUDA
  if (c.device != "cpu")
    return InvalidArgument("--device " + c.device + ": this build has CPU workers only (its LibTorch has no CUDA)");
#endif
  if (c.tls_cert.empty() != c.tls_key.empty()) return InvalidArgument("--tls-cert and --tls-key go together");
  if (!(c.request_timeout >= 0) || !(c.shutdown_timeout >= 0)) return InvalidArgument("timeouts must not be negative");
  // A deployment that forgot its model must not answer 200 with noise.
  if ((c.demo == "off" || c.demo == "0") && c.summarizer.empty() && c.qa.empty() && c.encoders.empty())
    return InvalidArgument(
        "no model to serve: pass --model DIR (ROPESERVE_MODEL), --qa DIR or --encoder DIR, or --demo on "
        "(ROPESERVE_DEMO=1) for the random-weight demo models");
  return Status::Ok();
}

namespace {

// A start-up that cannot go on: `message` is what the CLI prints.
Status Refused(const std::string& message) { return FailedPrecondition(message); }

// The span exporter of --otlp-traces-endpoint (none without one).
StatusOr<std::unique_ptr<api::OtlpExporter>> StartSpanExporter(const ServeConfig& f) {
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

api::HttpServerOptions HttpOptions(const ServeConfig& f) {
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
api::HttpServerOptions AdminOptions(const ServeConfig& f) {
  api::HttpServerOptions ao = HttpOptions(f);
  ao.port = f.admin_port;
  ao.admin = true;
  ao.allowed_origins.clear();
  ao.limits.max_connections = 32;
  ao.limits.request_read_timeout = std::chrono::seconds(10);
  return ao;
}

api::GrpcServerOptions GrpcOptions(const ServeConfig& f) {
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

}  // namespace

Status RunServer(ServeConfig f) {
  RS_RETURN_IF_ERROR(api::ConfigureLogging(f.log_format));
  RS_RETURN_IF_ERROR(ValidateServeConfig(f));

  api::ServingContext ctx;
  f.responses.ttl = std::chrono::seconds(static_cast<std::int64_t>(f.responses_ttl));
  ctx.responses = std::make_unique<api::ResponseStore>(f.responses);
  // The data directory (what survives restarts: files and batches).
  auto storage = Storage::Open(f.storage);
  if (!storage.ok()) return Refused(storage.status().message());
  (*storage)->Attach(ctx);
  if (f.storage.batch_scheduling == "gaps") f.engine.scheduler.background_priority = service::kBatchPriority;
  auto keys = api::ApiKeys::Load(f.api_keys, f.api_key_file);
  if (!keys.ok()) return Refused(keys.status().message());
  ctx.api_keys = std::move(*keys);
  if (ctx.api_keys.enabled()) spdlog::info("API keys required on /v1/* and gRPC Inference calls");
  // KV cache events: started before the engine, which publishes to it.
  auto kv_publisher = StartKvEvents(f.kv_events, f.device == "cpu" ? "CPU" : "GPU", f.engine);
  if (!kv_publisher.ok()) return Refused(kv_publisher.status().message());
  ctx.kv_events = *kv_publisher != nullptr;
  api::ServerMetrics metrics;
  ctx.metrics = &metrics;
  if (kv_events::ZmqPublisher* p = kv_publisher->get(); p != nullptr)
    metrics.AttachKvEvents([p] { return std::make_pair(p->published(), p->dropped()); });
  ctx.request_timeout_seconds = f.request_timeout;

  // SIGTERM / SIGINT start the drain; a second one exits at once.
  StopSignal stop;
  if (Status installed = stop.Install(); !installed.ok()) return Refused(installed.message());

  // Tracing: ids always; spans exported only to a collector.
  auto exporter = StartSpanExporter(f);
  if (!exporter.ok()) return Refused(exporter.status().message());
  api::Tracer tracer(std::move(*exporter), f.otlp_traces_sample_ratio);
  ctx.tracer = &tracer;
  metrics.AttachTracer(&tracer);
  api::ObserverFanOut observers({&metrics, &tracer});

  // gRPC's request preparation and QA answer selection (server/api/work_pool.h).
  ctx.work_pool = std::make_shared<api::WorkPool>(4, static_cast<std::size_t>(f.engine.scheduler.max_waiting_requests));

  // Listen first, so that probes answer while the model loads.
  api::HttpServer http(HttpOptions(f), ctx);
  if (Status s = http.Bind(); !s.ok()) return Refused(s.message());
  // The admin port: probes and metrics with connections of their own.
  std::optional<api::HttpServer> admin;
  if (f.admin_port >= 0) {
    admin.emplace(AdminOptions(f), ctx);
    if (Status s = admin->Bind(); !s.ok()) return Refused("--admin-port: " + s.message());
  }
  api::GrpcServer grpc_server(ctx);
  if (f.grpc_port >= 0) {
    if (Status s = grpc_server.Start(GrpcOptions(f)); !s.ok()) return Refused(s.message());
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
    return Refused(loaded.status().ToString());
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
  if (!http_status.ok()) return Refused(http_status.ToString());
  if (!admin_status.ok()) return Refused("admin port: " + admin_status.ToString());
  spdlog::info("stopped");
  return Status::Ok();
}

}  // namespace ropeserve::app
