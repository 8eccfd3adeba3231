#include "bench/offline_bench.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "bench/kernel_profile.h"
#include "bench/spec_bench.h"
#include "bench/workload.h"
#include "server/common/json_file.h"
#include "server/common/ready_signal.h"
#include "server/engine/engine.h"
#include "server/engine/kv_cache_sizing.h"
#include "server/models/decoder.h"
#include "server/runner/model_runner.h"
#include "server/serving/decoder_worker.h"
#include "server/serving/threads.h"
#include "server/structured/grammar.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve::bench {

namespace {

using Seconds = std::chrono::duration<double>;

struct EngineRun {
  double seconds = 0;
  std::int64_t generated = 0;
  std::vector<double> ttft, tpot;
  std::vector<std::vector<TokenId>> outputs;
  double peak_kv_usage = 0, kv_waste = 0;
  std::uint64_t preemptions = 0, prefix_hits = 0, prefix_queries = 0;
  std::uint64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted = 0;
  RunnerStats runner;
};

// What serve's flags would set for this run (the engine's options).
service::EngineOptions BenchEngineOptions(const BenchOptions& o, std::int64_t max_len) {
  service::EngineOptions eo;
  eo.block_size = o.block_size;
  eo.kv_cache_memory = o.kv_cache_memory;
  eo.gpu_memory_utilization = o.gpu_memory_utilization;
  eo.enforce_eager = o.enforce_eager;
  eo.scheduler.max_model_len = max_len;
  eo.scheduler.max_num_seqs = o.concurrency;
  eo.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  eo.scheduler.max_prefill_tokens_while_decoding = o.max_prefill_tokens_while_decoding;
  eo.scheduler.max_waiting_requests = static_cast<int>(std::min<std::int64_t>(o.num_requests + 1, 1 << 30));
  eo.scheduler.speculative = o.speculative;
  return eo;
}

// Keeps `concurrency` requests in flight until all are done, on a cache of
// `kv` (sized once for the whole benchmark) and the worker serve builds
// (BuildDecoderWorker). With `grammar`, every request is constrained to it
// and may end at EOS.
StatusOr<EngineRun> RunEngine(const DecoderModel& model, const BenchOptions& o, const Workload& w,
                              const KvCacheSize& kv, std::int64_t max_len,
                              std::shared_ptr<const structured::CompiledGrammar> grammar = nullptr,
                              bool time_phases = false) {
  RS_ASSIGN_OR_RETURN(const service::EngineOptions options,
                      ResolveEngineOptions(model, BenchEngineOptions(o, max_len)));
  RunnerDiagnostics diagnostics;  // serve's runner, with the bench's sampler choice
  diagnostics.sampling = o.sampler;
  diagnostics.time_phases = time_phases;
  RS_ASSIGN_OR_RETURN(DecoderWorker worker, BuildDecoderWorker(model, options, kv, diagnostics));
  if (UsesCudaGraphs(model, options) && worker.runner->captured_graphs() == 0)
    return Internal("the CUDA graphs were not captured: " + worker.execution);
  // The client loop sleeps until a stream has something (the streams'
  // notify hook). Polling each stream with a short timeout instead woke the
  // client every 200 us, and on two cores each wake-up preempted one of the
  // two compute threads mid-kernel while the other waited for it at the
  // join (~140 preemptions per token at one sequence). Declared before the
  // engine: its hooks may run until the engine stops.
  ReadySignal waker;
  Engine engine(worker.engine, *worker.executor);
  engine.Start();

  EngineRun run;
  run.outputs.resize(w.prompts.size());
  struct InFlight {
    std::size_t index;
    std::shared_ptr<RequestStream> stream;
    Clock::time_point submitted, last;
    bool got_first = false;
  };
  std::vector<InFlight> flying;
  std::size_t next = 0;
  const auto start = Clock::now();
  while (next < w.prompts.size() || !flying.empty()) {
    while (next < w.prompts.size() && static_cast<int>(flying.size()) < o.concurrency) {
      EngineRequest r;
      r.prompt = w.prompts[next];
      r.max_tokens = w.output_lens[next];
      r.stop.ignore_eos = grammar == nullptr;
      r.sampling.presence_penalty = o.presence_penalty;
      if (grammar) r.processor = std::make_shared<structured::GrammarProcessor>(grammar, r.max_tokens);
      RS_ASSIGN_OR_RETURN(auto s, engine.Submit(r));
      s->SetNotify([&waker] { waker.Set(); });
      flying.push_back({next, s, Clock::now(), Clock::now()});
      ++next;
    }
    bool progressed = false;
    for (std::size_t i = 0; i < flying.size();) {
      InFlight& f = flying[i];
      StreamChunk c = f.stream->Next(Clock::duration::zero());
      const auto now = Clock::now();
      progressed = progressed || !c.tokens.empty() || c.finished;
      if (!c.tokens.empty()) {
        if (!f.got_first) {
          run.ttft.push_back(Seconds(now - f.submitted).count());
          f.got_first = true;
          if (c.tokens.size() > 1) run.tpot.push_back(0.0);  // several tokens arrived together
        } else {
          const double per = Seconds(now - f.last).count() / static_cast<double>(c.tokens.size());
          for (std::size_t k = 0; k < c.tokens.size(); ++k) run.tpot.push_back(per);
        }
        f.last = now;
        for (auto& t : c.tokens) run.outputs[f.index].push_back(t.id);
      }
      if (c.finished) {
        if (c.finish_reason != FinishReason::kLength && c.finish_reason != FinishReason::kStop)
          return Internal("request ended early: " + c.error.ToString());
        flying.erase(flying.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    if (!flying.empty() && !progressed) {
      waker.WaitFor(std::chrono::milliseconds(100));  // a safety timeout: the loop polls again after it
      waker.Clear();
    }
  }
  run.seconds = Seconds(Clock::now() - start).count();
  engine.Stop();
  for (const auto& out : run.outputs) run.generated += static_cast<std::int64_t>(out.size());
  const auto& st = engine.stats();
  run.peak_kv_usage = st.peak_kv_usage;
  run.kv_waste = st.kv_waste_at_peak;
  run.preemptions = st.preemptions;
  run.prefix_hits = st.prefix_hits;
  run.prefix_queries = st.prefix_queries;
  run.spec_drafts = st.spec_drafts;
  run.spec_draft_tokens = st.spec_draft_tokens;
  run.spec_accepted = st.spec_accepted_tokens;
  run.runner = worker.runner->stats();
  return run;
}

// Static batching (PlanStaticBatches): padded batches in arrival order on
// the same runner and kernels as the engine.
StatusOr<double> RunStaticBaseline(const DecoderModel& model, const BenchOptions& o, const Workload& w) {
  const std::int64_t bs = o.block_size;
  const StaticPlan batches = PlanStaticBatches(w, o.concurrency, model.config().max_position_embeddings);
  const std::int64_t blocks_per_seq = (batches.tokens_per_sequence + bs - 1) / bs;
  ModelRunner runner(model, blocks_per_seq * o.concurrency, bs);
  std::vector<RequestId> previous;
  const auto start = Clock::now();
  for (const StaticBatch& batch : batches.batches) {
    const std::size_t b = batch.begin, e = batch.end;
    const std::int64_t pad_to = batch.pad_to, steps = batch.steps;
    StepPlan plan;
    plan.block_size = static_cast<int>(bs);
    plan.removed = std::move(previous);  // the runner drops the last batch's state
    previous.clear();
    for (std::size_t i = b; i < e; ++i) {
      ScheduledSequence s;
      s.request_id = i;
      s.token_ids.assign(static_cast<std::size_t>(pad_to - static_cast<std::int64_t>(w.prompts[i].size())), 0);
      s.token_ids.insert(s.token_ids.end(), w.prompts[i].begin(), w.prompts[i].end());  // left padding
      s.reset_blocks = true;
      for (std::int64_t k = 0; k < blocks_per_seq; ++k)
        s.new_blocks.push_back(static_cast<BlockId>(static_cast<std::int64_t>(i - b) * blocks_per_seq + k));
      s.needs_logits = true;
      plan.sequences.push_back(std::move(s));
      SamplingSpec greedy;
      greedy.id = i;
      plan.added.push_back(std::move(greedy));
      previous.push_back(i);
    }
    for (std::int64_t step = 0; step < steps; ++step) {
      RS_ASSIGN_OR_RETURN(StepOutput out, runner.Execute(plan));
      plan.added.clear();
      plan.removed.clear();
      for (std::size_t i = 0; i < plan.sequences.size(); ++i) {
        auto& s = plan.sequences[i];
        s.start_position += static_cast<std::int64_t>(s.token_ids.size());
        s.token_ids = {out.tokens[i].token};
        s.reset_blocks = false;
        s.new_blocks.clear();
      }
    }
  }
  return static_cast<double>(batches.useful) / Seconds(Clock::now() - start).count();
}

// Read bandwidth of the model's device (the host's with the compute
// threads, or a GPU's memory): the best of a few sums over a buffer much
// larger than the caches (item() waits for the device).
double MeasureReadBandwidth(at::Device device) {
  at::Tensor buf = at::ones({std::int64_t{1} << 27}, at::TensorOptions().dtype(at::kFloat).device(device));  // 512 MiB
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = Clock::now();
    volatile float sink = buf.sum().item<float>();
    (void)sink;
    const double s = Seconds(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(buf.numel() * 4) / s);
  }
  return best;
}

// Bytes of weights one decode step reads: every layer and the LM head (an
// untied embedding matrix is only read one row at a time). Int8 weights
// are one byte each (their per-row scales and the norms are negligible);
// int4 projections half a byte and, per 128, the scale the kernel reads
// (kernels/int4_weight.h) and a byte of zero point.
double WeightBytesPerToken(const ModelConfig& c, DType dtype, Quantization q, const at::Device& device) {
  double params = static_cast<double>(c.num_parameters());
  if (!c.tie_word_embeddings) params -= static_cast<double>(c.vocab_size) * static_cast<double>(c.hidden_size);
  if (IsInt4(q)) {
    // Per group of 128: a float16 scale and a zero point on the CPU (the
    // matrix-vector kernel's), a float32 scale and a zero point on CUDA.
    // int4's LM head: int8 on the CPU, the compute dtype on CUDA.
    const double head = static_cast<double>(c.vocab_size) * static_cast<double>(c.hidden_size);
    const double int4 = 0.5 + (device.is_cuda() ? 5.0 : 3.0) / 128;
    const double head_bytes = q == Quantization::kInt4All ? int4
                              : device.is_cuda()          ? static_cast<double>(DTypeSize(dtype))
                                                          : 1.0;
    return (params - head) * int4 + head * head_bytes;
  }
  return params * (q == Quantization::kInt8 ? 1.0 : static_cast<double>(DTypeSize(dtype)));
}

// Logits of every position of `ids` in one prefill chunk.
at::Tensor PrefillLogits(const DecoderModel& m, const std::vector<TokenId>& ids) {
  constexpr std::int64_t kBlock = 16;
  const std::int64_t blocks = (static_cast<std::int64_t>(ids.size()) + kBlock - 1) / kBlock;
  PagedKvCache cache = m.AllocatePagedKvCache(blocks, kBlock);
  return m
      .ForwardPaged(ContiguousChunk(std::vector<std::int64_t>(ids.begin(), ids.end()), 0, blocks, m.device()), cache,
                    nullptr)
      .to(at::kCPU);
}

double RelativeError(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).abs().max().item<double>() / std::max(want.abs().max().item<double>(), 1e-30);
}

// max |logits(quantized) - logits(unquantized)| / max |logits(unquantized)|
// over every position of `ids` (reported, so that another implementation
// can be measured on the same ids), the unquantized model loaded beside; for
// scale, the same measure between the unquantized model in --dtype and in
// float32 (random checkpoints amplify any rounding through their layers).
StatusOr<nlohmann::json> RelativeLogitError(const DecoderModel& quantized, const BenchOptions& o,
                                            const std::vector<TokenId>& ids) {
  RS_ASSIGN_OR_RETURN(auto plain, DecoderModel::Load(o.model, o.dtype));
  const at::Tensor want = PrefillLogits(*plain, ids);
  nlohmann::json out = {{"vs_unquantized", RelativeError(PrefillLogits(quantized, ids), want)},
                        {"unquantized_vs_float32", nullptr},
                        {"prompt_ids", ids}};
  if (o.dtype != DType::kF32) {
    RS_ASSIGN_OR_RETURN(auto f32, DecoderModel::Load(o.model, DType::kF32));
    out["unquantized_vs_float32"] = RelativeError(want, PrefillLogits(*f32, ids));
  }
  return out;
}

// The same workload constrained to --json-schema, interleaved with free
// runs (constrained, free, constrained, free after the main run, which
// also warms the process up: the overhead compares the two pairs), how
// many outputs the automaton accepts, and the compile time (vocabulary and
// schema).
StatusOr<nlohmann::json> RunConstrained(const DecoderModel& model, const BenchOptions& o, const Workload& w,
                                        const KvCacheSize& kv, std::int64_t max_len) {
  RS_ASSIGN_OR_RETURN(const std::string schema, ReadTextFile(o.json_schema));
  RS_ASSIGN_OR_RETURN(auto tokenizer, tok::Tokenizer::FromPath(o.model));
  const ModelConfig& c = model.config();
  const auto t0 = Clock::now();
  auto vocab =
      structured::TokenVocabulary::FromTokenizer(*tokenizer, static_cast<std::size_t>(c.vocab_size),
                                                 std::vector<TokenId>(c.eos_token_ids.begin(), c.eos_token_ids.end()));
  const auto t1 = Clock::now();
  structured::Constraint constraint{structured::Constraint::Kind::kJsonSchema, schema, {}, "--json-schema"};
  RS_ASSIGN_OR_RETURN(auto grammar, structured::CompiledGrammar::Compile(constraint, vocab));
  const auto t2 = Clock::now();
  double free_tok_s = 0, tok_s = 0, free_tpot = 0, tpot = 0;
  std::int64_t valid = 0, generated = 0;
  std::size_t outputs = 0;
  for (int pass = 0; pass < 2; ++pass) {
    RS_ASSIGN_OR_RETURN(EngineRun run, RunEngine(model, o, w, kv, max_len, grammar));
    tok_s += static_cast<double>(run.generated) / run.seconds / 2;
    tpot += 1e3 * Percentile(run.tpot, 0.5) / 2;
    generated += run.generated;
    for (const auto& out : run.outputs) {
      std::string bytes;
      for (TokenId t : out)
        if (const auto& b = vocab->Bytes(t)) bytes += *b;
      valid += grammar->dfa().Matches(bytes);
      ++outputs;
    }
    RS_ASSIGN_OR_RETURN(EngineRun free, RunEngine(model, o, w, kv, max_len));
    free_tok_s += static_cast<double>(free.generated) / free.seconds / 2;
    free_tpot += 1e3 * Percentile(free.tpot, 0.5) / 2;
  }
  return nlohmann::json{{"generated_tokens", generated / 2},
                        {"throughput_tok_s", tok_s},
                        {"free_throughput_tok_s", free_tok_s},
                        {"overhead", free_tok_s > 0 ? 1.0 - tok_s / free_tok_s : 0.0},
                        {"tpot_p50_ms", tpot},
                        {"free_tpot_p50_ms", free_tpot},
                        {"valid_outputs", valid},
                        {"outputs", outputs},
                        {"automaton_states", grammar->dfa().num_states()},
                        {"vocabulary_ms", 1e3 * Seconds(t1 - t0).count()},
                        {"compile_ms", 1e3 * Seconds(t2 - t1).count()},
                        {"mask_cache_mib", static_cast<double>(grammar->cached_bytes()) / (1 << 20)}};
}

}  // namespace

// Device kernels of `steps` batch-1 decode steps: the request profiled with
// steps + 1 output tokens, less the same request with one (its prefill, its
// first token, the worker's start with its graph capture), by kernel name.
StatusOr<nlohmann::json> ProfileDecodeSteps(const DecoderModel& model, const BenchOptions& one,
                                            const std::vector<TokenId>& prompt, const KvCacheSize& kv,
                                            std::int64_t max_len, int steps) {
  const auto profile = [&](std::int64_t outputs) {
    const Workload w{{prompt}, {outputs}};
    return ProfileDeviceKernels([&] { return RunEngine(model, one, w, kv, max_len).status(); });
  };
  RS_ASSIGN_OR_RETURN(const std::vector<KernelTotal> longer, profile(steps + 1));
  RS_ASSIGN_OR_RETURN(const std::vector<KernelTotal> shorter, profile(1));
  const std::vector<KernelTotal> decode = KernelDifference(longer, shorter);
  std::int64_t calls = 0;
  double ms = 0;
  nlohmann::json top = nlohmann::json::array();
  for (const KernelTotal& k : decode) {
    calls += k.calls;
    ms += k.ms;
  }
  for (std::size_t i = 0; i < std::min<std::size_t>(decode.size(), 10); ++i) {
    const KernelTotal& k = decode[i];
    top.push_back({{"name", k.name.substr(0, 160)},
                   {"calls_per_step", static_cast<double>(k.calls) / steps},
                   {"ms_per_step", k.ms / steps},
                   {"share", ms > 0 ? k.ms / ms : 0.0}});
  }
  return nlohmann::json{{"steps", steps},
                        {"per_step", static_cast<double>(calls) / steps},
                        {"device_ms_per_step", ms / steps},
                        {"distinct", decode.size()},
                        {"top", top}};
}

Status RunBench(const BenchOptions& o) {
  if (o.num_requests < 1 || o.concurrency < 1) return InvalidArgument("--num-requests and --concurrency must be >= 1");
  if (o.profile_steps > 0 && (at::Device(o.device).is_cpu() || o.batch1_tokens <= 1))
    return InvalidArgument(
        "--profile-steps profiles the device's kernels in batch-1 decode: it needs --device cuda "
        "and --batch1-tokens > 1");
  RS_ASSIGN_OR_RETURN(auto model, DecoderModel::Load(o.model, o.dtype, o.quantization, at::Device(o.device)));
  const ModelConfig& c = model->config();
  const std::int64_t max_len = o.max_model_len > 0 ? std::min(o.max_model_len, c.max_position_embeddings)
                                                   : std::min<std::int64_t>(c.max_position_embeddings, 4096);
  if (o.prefill_tokens + 1 > max_len)
    return InvalidArgument("--prefill-tokens must leave room for one output token within --max-model-len");
  std::vector<TokenId> document;
  if (!o.document.empty()) {
    RS_ASSIGN_OR_RETURN(auto tokenizer, tok::Tokenizer::FromPath(o.model));
    RS_ASSIGN_OR_RETURN(std::string text, ReadTextFile(o.document));
    RS_ASSIGN_OR_RETURN(auto encoding, tokenizer->Encode(text, /*add_special_tokens=*/false));
    for (const auto id : encoding.ids) document.push_back(static_cast<TokenId>(id));
  }
  RS_ASSIGN_OR_RETURN(Workload w, MakeWorkload(o.input_len, o.output_len, o.num_requests, o.seed, c.vocab_size, max_len,
                                               o.document.empty() ? nullptr : &document));
  if (!o.workload_out.empty()) {
    const nlohmann::json dump = {{"input_len", o.input_len},
                                 {"output_len", o.output_len},
                                 {"seed", o.seed},
                                 {"prompts", w.prompts},
                                 {"output_lens", w.output_lens}};
    std::ofstream out(o.workload_out, std::ios::trunc);
    out << dump.dump() << "\n";
    if (!out.flush()) return InvalidArgument("--workload-out: cannot write " + o.workload_out);
  }
  // The cache serve would size for these flags, once: every run below
  // (alone, batch-1, prefill) gets a cache of the same size.
  RS_ASSIGN_OR_RETURN(const service::EngineOptions sizing,
                      ResolveEngineOptions(*model, BenchEngineOptions(o, max_len)));
  RS_ASSIGN_OR_RETURN(KvCacheSize kv, SizeDecoderKvCache(*model, sizing));

  RS_ASSIGN_OR_RETURN(EngineRun run, RunEngine(*model, o, w, kv, max_len));
  const double tok_s = static_cast<double>(run.generated) / run.seconds;
  double baseline = 0;
  if (o.baseline_static) {
    RS_ASSIGN_OR_RETURN(baseline, RunStaticBaseline(*model, o, w));
  }
  std::int64_t mismatches = -1;
  if (o.check_invariance) {
    mismatches = 0;
    BenchOptions alone = o;
    alone.concurrency = 1;
    for (std::size_t i = 0; i < w.prompts.size(); ++i) {
      Workload one{{w.prompts[i]}, {w.output_lens[i]}};
      alone.num_requests = 1;
      RS_ASSIGN_OR_RETURN(EngineRun r, RunEngine(*model, alone, one, kv, max_len));
      mismatches += r.outputs[0] != run.outputs[i];
    }
  }
  std::int64_t prompt_tokens = 0;
  for (const auto& p : w.prompts) prompt_tokens += static_cast<std::int64_t>(p.size());

  nlohmann::json batch1 = nullptr;
  if (o.batch1_tokens > 1) {
    BenchOptions one = o;
    one.concurrency = 1;
    one.num_requests = 1;
    Workload single{{std::vector<TokenId>(w.prompts[0].begin(),
                                          w.prompts[0].begin() + std::min<std::size_t>(16, w.prompts[0].size()))},
                    {o.batch1_tokens}};
    RS_ASSIGN_OR_RETURN(EngineRun r, RunEngine(*model, one, single, kv, max_len));
    // Every token after the first: their count over the time they took (the
    // first interval alone, as this once used, swung 13-39 tok/s run to run).
    double decode_seconds = 0;
    for (double t : r.tpot) decode_seconds += t;
    const double tok_s = decode_seconds > 0 ? static_cast<double>(r.tpot.size()) / decode_seconds : 0;
    const double bandwidth = MeasureReadBandwidth(model->device());
    const double bytes = WeightBytesPerToken(c, o.dtype, o.quantization, model->device());
    const double roofline = bandwidth / bytes;
    // Where a step's time goes: the same request again (at most 64
    // tokens), the runner waiting for the device after each phase
    // (RunnerOptions::time_phases); per step, in milliseconds; "engine" is
    // the rest of the run's time per step (scheduling, streams, this loop).
    single.output_lens[0] = std::min<std::int64_t>(o.batch1_tokens, 64);
    RS_ASSIGN_OR_RETURN(EngineRun timed, RunEngine(*model, one, single, kv, max_len, /*grammar=*/nullptr, true));
    const RunnerStats& st = timed.runner;
    const double steps = static_cast<double>(std::max<std::uint64_t>(st.steps, 1));
    const double prepare = 1e-6 * static_cast<double>(st.prepare_ns) / steps,
                 forward = 1e-6 * static_cast<double>(st.forward_ns) / steps,
                 reduce = 1e-6 * static_cast<double>(st.reduce_ns) / steps;
    batch1 = {{"decode_tok_s", tok_s},
              {"read_bandwidth_gb_s", bandwidth / 1e9},
              {"weight_bytes_per_token", bytes},
              {"roofline_tok_s", roofline},
              {"bandwidth_fraction", roofline > 0 ? tok_s / roofline : 0.0},
              {"step_ms",
               {{"steps", st.steps},
                {"prepare", prepare},
                {"forward", forward},
                {"reduce", reduce},
                {"engine", std::max(0.0, 1e3 * timed.seconds / steps - prepare - forward - reduce)}}}};
    if (o.profile_steps > 0) {
      RS_ASSIGN_OR_RETURN(batch1["kernels"],
                          ProfileDecodeSteps(*model, one, single.prompts[0], kv, max_len, o.profile_steps));
    }
  }

  nlohmann::json prefill = nullptr;
  if (o.prefill_tokens > 0) {
    // The workload's prompts, concatenated, cut to the length (random ids).
    std::vector<TokenId> prompt;
    while (static_cast<int>(prompt.size()) < o.prefill_tokens)
      for (const auto& p : w.prompts) prompt.insert(prompt.end(), p.begin(), p.end());
    prompt.resize(static_cast<std::size_t>(o.prefill_tokens));
    BenchOptions one = o;
    one.concurrency = 1;
    one.num_requests = 1;
    RS_ASSIGN_OR_RETURN(EngineRun r, RunEngine(*model, one, Workload{{prompt}, {1}}, kv, max_len));
    prefill = {{"tokens", o.prefill_tokens},
               {"seconds", r.ttft[0]},
               {"tok_s", r.ttft[0] > 0 ? o.prefill_tokens / r.ttft[0] : 0.0}};
  }

  // (A 4-bit checkpoint has no unquantized model to compare with.)
  nlohmann::json logit_error = nullptr;
  if (o.quantization != Quantization::kNone && !model->config().int4_weights) {
    RS_ASSIGN_OR_RETURN(logit_error, RelativeLogitError(*model, o, w.prompts[0]));
  }

  nlohmann::json constrained = nullptr;
  if (!o.json_schema.empty()) {
    RS_ASSIGN_OR_RETURN(constrained, RunConstrained(*model, o, w, kv, max_len));
  }

  nlohmann::json speculative = nullptr;
  if (o.speculative.enabled()) {
    const auto proposed = static_cast<double>(run.spec_draft_tokens);
    speculative = {
        {"method", "ngram"},
        {"num_speculative_tokens", o.speculative.num_tokens},
        {"prompt_lookup", {o.speculative.min_ngram, o.speculative.max_ngram}},
        {"steps_with_proposals", run.spec_drafts},
        {"proposed_tokens", run.spec_draft_tokens},
        {"accepted_tokens", run.spec_accepted},
        {"acceptance_rate", proposed > 0 ? static_cast<double>(run.spec_accepted) / proposed : 0.0},
        {"tokens_from_proposals",
         run.generated > 0 ? static_cast<double>(run.spec_accepted) / static_cast<double>(run.generated) : 0.0}};
  }
  nlohmann::json verify_cost = nullptr;
  if (o.spec_verify_cost) {
    VerifyCostOptions v;
    v.batches = o.spec_verify_batches;
    RS_ASSIGN_OR_RETURN(verify_cost, MeasureVerifyCost(*model, o, v));
  }

  nlohmann::ordered_json j = {
      {"model", o.model},
      {"device", model->device().str()},
      {"dtype", DTypeSafetensorsName(o.dtype)},
      {"quantization", QuantizationName(o.quantization)},
      {"relative_logit_error", logit_error},
      {"num_requests", o.num_requests},
      {"concurrency", o.concurrency},
      {"input_len", o.input_len},
      {"output_len", o.output_len},
      {"prompt_tokens", prompt_tokens},
      {"generated_tokens", run.generated},
      {"seconds", run.seconds},
      {"throughput_tok_s", tok_s},
      {"requests_s", static_cast<double>(o.num_requests) / run.seconds},
      {"baseline_tok_s", o.baseline_static ? nlohmann::json(baseline) : nlohmann::json(nullptr)},
      {"ratio", o.baseline_static && baseline > 0 ? nlohmann::json(tok_s / baseline) : nlohmann::json(nullptr)},
      {"ttft_p50_ms", 1e3 * Percentile(run.ttft, 0.5)},
      {"ttft_p90_ms", 1e3 * Percentile(run.ttft, 0.9)},
      {"ttft_p99_ms", 1e3 * Percentile(run.ttft, 0.99)},
      {"tpot_p50_ms", 1e3 * Percentile(run.tpot, 0.5)},
      {"tpot_p90_ms", 1e3 * Percentile(run.tpot, 0.9)},
      {"tpot_p99_ms", 1e3 * Percentile(run.tpot, 0.99)},
      {"kv_cache_blocks", kv.num_blocks},
      {"peak_kv_usage", run.peak_kv_usage},
      {"kv_waste", run.kv_waste},
      {"preemptions", run.preemptions},
      {"prefix_hits", run.prefix_hits},
      {"prefix_queries", run.prefix_queries},
      {"invariance_mismatches", mismatches >= 0 ? nlohmann::json(mismatches) : nlohmann::json(nullptr)},
      {"batch1", batch1},
      {"prefill", prefill},
      {"constrained", constrained},
      {"speculative", speculative},
      {"spec_verify_cost", verify_cost},
      {"threads", ComputeThreads()},
  };
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    for (auto& [k, v] : j.items()) std::printf("%-22s %s\n", k.c_str(), v.dump().c_str());
  }
  return Status::Ok();
}

}  // namespace ropeserve::bench
