// `ropeserve serve`: loads a model and serves the REST API until SIGINT or
// SIGTERM. Without --model it serves a generated demo model.
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "server/api/grpc_service.h"
#include "server/api/http_server.h"
#include "server/api/model_service.h"
#include "server/checkpoint/model_generator.h"
#include "server/cli/commands.h"
#include "server/tokenizer/tokenizer.h"
#include "server/models/decoder.h"
#include "server/runner/threads.h"

namespace ropeserve::cli {

namespace {

struct ServeFlags {
  std::string model;
  std::string served_model_name;
  std::string host = "0.0.0.0";
  int http_port = 8080;
  int grpc_port = 50051;
  std::string dtype = "auto";
  std::size_t max_body_bytes = 1 << 20;
  api::EngineOptions engine;
};

std::string CacheDir() {
  if (const char* d = std::getenv("ROPESERVE_CACHE"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/ropeserve";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/ropeserve";
  return "/tmp/ropeserve-cache";
}

StatusOr<std::string> EnsureDemoModel() {
  const std::string dir = CacheDir() + "/models/demo-tiny";
  if (!std::filesystem::exists(dir + "/config.json")) {
    spdlog::info("generating the demo model into {}", dir);
    MakeModelOptions o;  // preset "tiny", seed 0: the same bytes everywhere
    RS_RETURN_IF_ERROR(MakeModel(dir, o));
  }
  return dir;
}

int Run(ServeFlags f) {
  bool demo = false;
  if (f.model.empty()) {
    auto dir = EnsureDemoModel();
    if (!dir.ok()) return Fail(dir.status().ToString());
    f.model = *dir;
    demo = true;
  }
  if (f.served_model_name.empty())
    f.served_model_name = demo ? "demo-tiny" : std::filesystem::path(f.model).filename().string();

  // Block the stop signals in every thread; one thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const DType dtype = ResolveComputeDType(f.dtype, f.model);
  auto model = DecoderModel::Load(f.model, dtype);
  if (!model.ok()) return Fail(model.status().ToString());
  const ModelConfig& c = (*model)->config();
  spdlog::info("loaded {} ({}, {} layers, hidden {}, {:.1f}M parameters) from {} as {}, {} compute threads",
               f.served_model_name, c.architecture, c.num_hidden_layers, c.hidden_size,
               static_cast<double>(c.num_parameters()) / 1e6, f.model, DTypeSafetensorsName(dtype), ComputeThreads());
  if (demo) {
    spdlog::warn("*** DEMO MODEL: random weights, its output is meaningless. ***");
    spdlog::warn("*** Serve a real checkpoint with: ropeserve serve --model /path/to/Qwen2.5-0.5B-Instruct ***");
  }

  // The tokenizer is optional (token-id prompts work without it), but a
  // tokenizer.json that is present must load: a broken one is an error.
  std::shared_ptr<const tok::Tokenizer> tokenizer;
  if (std::filesystem::exists(std::filesystem::path(f.model) / "tokenizer.json")) {
    auto t = tok::Tokenizer::FromPath(f.model);
    if (!t.ok()) return Fail(t.status().ToString());
    tokenizer = *t;
    spdlog::info("tokenizer: {} tokens{}", tokenizer->VocabSize(),
                 tokenizer->config().chat_template ? ", chat template loaded" : ", no chat template");
  } else {
    spdlog::warn("no tokenizer.json in {}: only token-id prompts are accepted", f.model);
  }
  auto created = api::ModelService::Create(**model, f.served_model_name, f.engine, tokenizer);
  if (!created.ok()) return Fail(created.status().ToString());
  api::ModelService& service = **created;
  api::GrpcServer grpc_server(service);
  if (f.grpc_port >= 0) {
    if (Status s = grpc_server.Start(f.host, f.grpc_port); !s.ok()) return Fail(s.ToString());
  }
  api::HttpServerOptions opts;
  opts.host = f.host;
  opts.port = f.http_port;
  opts.max_body_bytes = f.max_body_bytes;
  api::HttpServer server(opts, service);
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    server.Stop();
  });
  Status s = server.Serve();
  grpc_server.Stop();
  if (!s.ok()) {
    // Wake the waiter so the process can exit.
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    return Fail(s.ToString());
  }
  pthread_kill(waiter.native_handle(), SIGTERM);  // no-op if it already returned from sigwait
  waiter.join();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

Runner AddServe(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* sub = app.add_subcommand("serve", "Serve a model over REST (OpenAI-style /v1/completions) and gRPC (proto/ropeserve/v1)");
  sub->add_option("--model", f->model,
                  "Checkpoint directory in Hugging Face layout (default: a generated demo model with random weights)")
      ->envname("ROPESERVE_MODEL")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--served-model-name", f->served_model_name, "Model id reported by the API (default: directory name)");
  sub->add_option("--host", f->host, "Address to listen on")->capture_default_str()->envname("ROPESERVE_HOST");
  sub->add_option("--http-port", f->http_port, "HTTP port")
      ->capture_default_str()
      ->envname("ROPESERVE_HTTP_PORT")
      ->check(CLI::Range(0, 65535));
  sub->add_option("--grpc-port", f->grpc_port, "gRPC port (-1 disables gRPC)")
      ->capture_default_str()
      ->envname("ROPESERVE_GRPC_PORT")
      ->check(CLI::Range(-1, 65535));
  sub->add_option("--dtype", f->dtype, "Compute dtype (auto = bfloat16 for bf16 checkpoints, else float32)")
      ->capture_default_str()
      ->check(CLI::IsMember(kDTypeChoices));
  auto& e = f->engine;
  sub->add_option("--max-model-len", e.scheduler.max_model_len,
                  "Longest prompt + generation accepted (default: the model's max_position_embeddings)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 32));
  sub->add_option("--max-num-seqs", e.scheduler.max_num_seqs, "Most sequences in one step")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub->add_option("--max-num-batched-tokens", e.scheduler.max_num_batched_tokens,
                  "Token budget of one step (decodes + prefill chunks)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24));
  sub->add_option("--block-size", e.block_size, "Tokens per KV cache block")->capture_default_str()->check(CLI::Range(1, 1024));
  sub->add_option("--kv-cache-memory", e.kv_cache_memory,
                  "KV cache budget: bytes (4G, 512M, ...) or a fraction of available memory (0.25)")
      ->capture_default_str()
      ->envname("ROPESERVE_KV_CACHE_MEMORY");
  sub->add_option("--max-queue-requests", e.scheduler.max_waiting_requests,
                  "Waiting requests beyond which new ones get 429 / RESOURCE_EXHAUSTED")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  sub->add_option("--max-queue-tokens", e.scheduler.max_waiting_tokens, "Waiting prompt tokens beyond which new requests get 429")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
  sub->add_option("--max-body-bytes", f->max_body_bytes, "Largest accepted request body")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1024}, std::size_t{1} << 30));
  return [f] { return Run(*f); };
}

}  // namespace ropeserve::cli
