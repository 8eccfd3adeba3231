#include "server/app/serve_models.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_config.h"
#include "kernels/cpu/kernel_table.h"
#include "server/app/test_hooks.h"
#include "server/checkpoint/config_overrides.h"
#include "server/checkpoint/model_generator.h"
#include "server/serving/compute_dtype.h"
#include "server/serving/threads.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve::app {

EncoderSpec SplitEncoderSpec(const std::string& value) {
  const std::size_t eq = value.find('=');
  if (std::filesystem::is_directory(value) || eq == std::string::npos) return {"", value};
  return {value.substr(0, eq), value.substr(eq + 1)};
}

namespace {

std::string CacheDir() {
  if (const char* d = std::getenv("ROPESERVE_CACHE"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/ropeserve";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/ropeserve";
  return "/tmp/ropeserve-cache";
}

// A demo model in the cache, generated on first use by `make` (fixed seeds:
// the same bytes everywhere).
StatusOr<std::string> EnsureDemo(const std::string& name, const std::function<Status(const std::string&)>& make) {
  const std::string dir = CacheDir() + "/models/" + name;
  if (!std::filesystem::exists(dir + "/config.json")) {
    spdlog::info("generating the demo model {} into {}", name, dir);
    RS_RETURN_IF_ERROR(make(dir));
  }
  return dir;
}

StatusOr<std::string> EnsureDemoModel() {
  return EnsureDemo("demo-tiny", [](const std::string& dir) { return MakeModel(dir, MakeModelOptions{}); });
}

StatusOr<std::string> EnsureDemoQaModel() {
  return EnsureDemo("demo-qa", [](const std::string& dir) { return MakeEncoderModel(dir, MakeEncoderOptions{}); });
}

StatusOr<std::string> EnsureDemoEmbeddingModel() {
  return EnsureDemo("demo-embed", [](const std::string& dir) {
    MakeEncoderOptions o;
    o.head = "embedding";
    return MakeEncoderModel(dir, o);
  });
}

}  // namespace

namespace {

// The decoder (--model, or the demo model), its tokenizer and its engine.
Status LoadDecoder(ServeConfig& f, bool demo, EngineObserver& observer, Loaded& out) {
  if (f.served_model_name.empty())
    f.served_model_name = demo ? "demo-tiny" : std::filesystem::path(f.summarizer).filename().string();
  DType dtype = ResolveComputeDType(f.dtype, f.summarizer, f.device == "cpu");
  // CUDA workers compute in 16 bits: auto takes bfloat16 for float32 checkpoints there.
  if (f.dtype == "auto" && dtype == DType::kF32 && f.device.rfind("cuda", 0) == 0) dtype = DType::kBF16;
  const Quantization quantization = ParseQuantization(f.quantization).value_or(Quantization::kNone);
  RS_ASSIGN_OR_RETURN(out.model, DecoderModel::Load(f.summarizer, dtype, quantization, at::Device(f.device)));
  const ModelConfig& c = out.model->config();
  spdlog::info(
      "loaded {} ({}, {} layers, hidden {}, {:.1f}M parameters) from {} as {}{}", f.served_model_name, c.architecture,
      c.num_hidden_layers, c.hidden_size, static_cast<double>(c.num_parameters()) / 1e6, f.summarizer,
      DTypeSafetensorsName(dtype),
      quantization == Quantization::kNone ? "" : std::string(" with ") + QuantizationName(quantization) + " weights");
  if (demo) {
    spdlog::warn("*** DEMO MODEL: random weights, its output is meaningless. ***");
    spdlog::warn("*** Serve a real checkpoint with: ropeserve serve --model /path/to/Qwen2.5-0.5B-Instruct ***");
  }
  // The tokenizer is optional (token-id prompts work without it), but a
  // tokenizer.json that is present must load: a broken one is an error.
  std::shared_ptr<const tok::Tokenizer> tokenizer;
  if (std::filesystem::exists(std::filesystem::path(f.summarizer) / "tokenizer.json")) {
    RS_ASSIGN_OR_RETURN(tokenizer, tok::Tokenizer::FromPath(f.summarizer));
    spdlog::info("tokenizer: {} tokens{}", tokenizer->VocabSize(),
                 tokenizer->config().chat_template ? ", chat template loaded" : ", no chat template");
  } else {
    spdlog::warn("no tokenizer.json in {}: only token-id prompts are accepted", f.summarizer);
  }
  f.engine.observer = &observer;
  f.engine.requests.priority_scheduling = f.scheduling_policy == "priority";
  if (const char* every = TestHook("ROPESERVE_INJECT_FAULTS"); every != nullptr && std::atoll(every) > 0) {
    f.engine.inject_faults_every = std::atoll(every);
    spdlog::warn("*** ROPESERVE_INJECT_FAULTS={}: every {}th forward fails (a test hook) ***", every,
                 f.engine.inject_faults_every);
  }
  RS_ASSIGN_OR_RETURN(out.service, ServeDecoder(*out.model, f.served_model_name, f.engine, tokenizer));
  const KvCacheSize& kv = out.service->kv_cache();
  spdlog::info("KV cache: {} blocks x {} tokens = {} tokens, {} bytes per token, {:.1f} MiB", kv.num_blocks,
               out.service->block_size(), kv.tokens, out.model->KvBytesPerToken(),
               static_cast<double>(kv.bytes) / (1 << 20));
  if (const KvCacheSize& tier = out.service->kv_offload(); tier.num_blocks > 0)
    spdlog::info("KV offload tier ({}): {} blocks = {} tokens, {:.1f} MiB",
                 f.engine.kv_offload_path.empty() ? "host memory" : "a file in " + f.engine.kv_offload_path,
                 tier.num_blocks, tier.tokens, static_cast<double>(tier.bytes) / (1 << 20));
  spdlog::info("steps: {}", out.service->execution());
  return Status::Ok();
}

// The engine whose steps run the encoders' and the QA model's windows:
// the decoder's; without a decoder each service runs its own worker.
Engine* SharedEngine(const Loaded& out) { return out.service ? &out.service->engine() : nullptr; }

Status LoadQa(ServeConfig& f, bool demo_qa, api::ServerMetrics& metrics,
              const std::shared_ptr<api::WorkPool>& work_pool, Loaded& out) {
  service::QaServiceOptions qo;
  const std::string name = demo_qa ? "demo-qa" : std::filesystem::path(f.qa).filename().string();
  qo.on_latency = [&metrics, name](double seconds) { metrics.ObserveQaLatency(name, seconds); };
  qo.engine = SharedEngine(out);
  qo.max_context_bytes = f.qa_max_context_bytes;
  qo.max_queue_requests = f.engine.scheduler.max_waiting_requests;
  qo.max_windows = f.qa_max_windows;
  // gRPC Answer calls select their answers on the work pool, not on the
  // engine's thread.
  if (auto pool = work_pool) qo.post = [pool](std::function<void()> fn) { return pool->TrySubmit(std::move(fn)); };
  const DType qa_dtype = ParseDTypeFlag(f.qa_dtype).value_or(DType::kF32);
  RS_ASSIGN_OR_RETURN(out.qa, LoadQaService(f.qa, name, qo, qa_dtype, f.device));  // the decoder's device
  const EncoderConfig& qc = out.qa->config();
  spdlog::info("loaded QA model {} ({}, {} layers, hidden {}) from {} as {} on {}", name, qc.architecture,
               qc.num_hidden_layers, qc.hidden_size, f.qa, DTypeSafetensorsName(qa_dtype), f.device);
  if (!out.qa->scores_null_answer())
    spdlog::warn("the QA tokenizer in {} names no cls_token: the null answer cannot be scored", f.qa);
  if (demo_qa) spdlog::warn("*** DEMO QA MODEL: random weights, its answers are meaningless. ***");
  return Status::Ok();
}

Status LoadEncoders(ServeConfig& f, bool demo_qa, api::ServerMetrics& metrics,
                    const std::shared_ptr<api::WorkPool>& work_pool, Loaded& out) {
  const DType encoder_dtype = ParseDTypeFlag(f.encoder_dtype).value_or(DType::kF32);
  std::map<std::string, nlohmann::json> overrides;  // by encoder name (validated by the flag)
  for (const std::string& flag : f.hf_overrides) {
    RS_ASSIGN_OR_RETURN(auto named, ParseNamedOverrides(flag));
    overrides[named.first] = std::move(named.second);
  }
  for (const std::string& flag : f.encoders) {
    // DIR, or NAME=DIR (the model id the API reports, as --served-model-name).
    const auto [named, dir] = SplitEncoderSpec(flag);
    service::EncoderServiceOptions eo;
    eo.engine = SharedEngine(out);
    eo.max_queue_requests = f.engine.scheduler.max_waiting_requests;
    const std::string name = demo_qa          ? "demo-embed"
                             : !named.empty() ? named
                                              : std::filesystem::path(dir).filename().string();
    eo.on_latency = [&metrics, name](double seconds) { metrics.ObserveEmbeddingLatency(name, seconds); };
    // gRPC Embed calls pool their vectors on the work pool, not on the engine's thread.
    if (auto pool = work_pool) eo.post = [pool](std::function<void()> fn) { return pool->TrySubmit(std::move(fn)); };
    for (const auto& e : out.encoders)
      if (e->name() == name) return InvalidArgument("--encoder: two models named '" + name + "'");
    std::optional<ConfigOverlay> overlay;  // --hf-overrides: config.json with the keys replaced
    if (auto it = overrides.find(name); it != overrides.end()) {
      RS_ASSIGN_OR_RETURN(ConfigOverlay o, ConfigOverlay::Create(dir, it->second));
      overlay.emplace(std::move(o));
      overrides.erase(it);
    }
    RS_ASSIGN_OR_RETURN(auto e, LoadEncoderService(overlay ? overlay->path() : dir, name, eo, encoder_dtype, f.device));
    const EncoderConfig& ec = e->config();
    if (e->embeds()) {
      spdlog::info("loaded embedding model {} ({}, {} layers, {} dimensions, {} pooling from {}) from {} as {} on {}",
                   name, ec.architecture, ec.num_hidden_layers, e->dimensions(),
                   embedding::PoolingName(e->pooling().pooling), e->pooling().source, dir,
                   DTypeSafetensorsName(encoder_dtype), f.device);
    } else {
      spdlog::info("loaded {} model {} ({}, {} layers, {} labels, {}) from {} as {} on {}", e->task(), name,
                   ec.architecture, ec.num_hidden_layers, ec.num_labels,
                   ScoreActivationName(e->scores_pairs() ? ec.score_activation : ec.classify_activation), dir,
                   DTypeSafetensorsName(encoder_dtype), f.device);
    }
    out.encoder_list.push_back(e.get());
    out.encoders.push_back(std::move(e));
  }
  if (!overrides.empty())
    return InvalidArgument("--hf-overrides " + overrides.begin()->first + "=...: no --encoder is named '" +
                           overrides.begin()->first + "'");
  if (demo_qa) spdlog::warn("*** DEMO EMBEDDING MODEL: random weights, its embeddings are meaningless. ***");
  return Status::Ok();
}

}  // namespace

bool ServesDemoDecoder(const ServeConfig& f) {
  if (!f.summarizer.empty()) return false;
  if (f.demo == "on" || f.demo == "1") return true;
  return f.demo == "auto" && f.qa.empty() && f.encoders.empty();
}

StatusOr<Loaded> LoadServeModels(ServeConfig& f, api::ServerMetrics& metrics, EngineObserver& observer,
                                 const std::shared_ptr<api::WorkPool>& work_pool) {
  // No model named: every demo model (unless --demo off, refused before);
  // only encoders or a QA model: those alone, unless --demo on adds the
  // demo decoder.
  const bool demo = ServesDemoDecoder(f);
  const bool demo_qa = f.demo != "off" && f.demo != "0" && f.summarizer.empty() && f.qa.empty() && f.encoders.empty();
  if (demo) {
    RS_ASSIGN_OR_RETURN(f.summarizer, EnsureDemoModel());
  }
  Loaded out;
  if (!f.summarizer.empty()) RS_RETURN_IF_ERROR(LoadDecoder(f, demo, observer, out));
  std::string kernels;
  for (const auto& [name, value] : cpu::DescribeKernelConfig(cpu::GetKernelConfig()))
    kernels += (kernels.empty() ? "" : " ") + name + "=" + value;
  spdlog::info("{} compute threads, kernels: {}", ComputeThreads(), kernels);
  if (at::Device(f.device).is_cpu() && cpu::ActiveIsa() == cpu::Isa::kGeneric)
    spdlog::warn(
        "the CPU kernels run their generic variants (--kernel-isa generic, or a CPU with neither AVX2 nor "
        "NEON): the projections run as scalar reference code, many times slower than a vector ISA's");
  if (!out.service) spdlog::info("no generation model: the generation endpoints answer 501 (serve --model DIR)");
  if (demo_qa) {
    RS_ASSIGN_OR_RETURN(f.qa, EnsureDemoQaModel());
  }
  if (!f.qa.empty()) RS_RETURN_IF_ERROR(LoadQa(f, demo_qa, metrics, work_pool, out));
  if (demo_qa) {
    RS_ASSIGN_OR_RETURN(std::string dir, EnsureDemoEmbeddingModel());
    f.encoders.push_back(dir);
  }
  RS_RETURN_IF_ERROR(LoadEncoders(f, demo_qa, metrics, work_pool, out));
  return out;
}

}  // namespace ropeserve::app
