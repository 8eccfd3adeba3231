// The engine: one thread owns the scheduler (and through it every Request),
// the block pool and the model executor; API threads Submit requests and
// read each request's output channel (RequestStream). Only the inbox and
// the streams lock.
//
// Sampling happens in the executor (the runner), per request with its own
// seeded generator, so a request's tokens do not depend on what else is in
// the batch; the engine only sees sampled ids and their logprobs.
//
// Readers are woken off the engine thread: with its own thread (Start) the
// engine appends a step's output to the streams and hands their wakes to
// a StreamWaker (stream_waker.h says why); driven from the caller's thread
// (RunUntilIdle, RunOnce) it wakes them at once.
//
// Failures: an exception thrown by the model forward, the encoder runner or
// a stream callback fails the requests of that step (their streams end with
// FinishReason::kError; a callback the StreamWaker ran, at the request's
// next token); the engine thread goes on with the others.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "server/engine/encoder_queue.h"
#include "server/engine/kv_events.h"
#include "server/engine/model_executor.h"
#include "server/engine/request.h"
#include "server/engine/request_stream.h"
#include "server/engine/scheduler.h"
#include "server/engine/stream_waker.h"
#include "server/sampler/sampling.h"

namespace ropeserve {

// What a caller submits.
struct EngineRequest {
  std::vector<TokenId> prompt;
  std::int64_t max_tokens = 16;
  StopConditions stop;
  SamplingParams sampling;
  std::size_t top_logprobs = 0;
  // Logprobs of the prompt's tokens (after the first) with this many
  // alternatives; nullopt = none. Costs a logits row per prompt token and
  // the prefix cache's help.
  std::optional<std::size_t> prompt_logprobs;
  std::shared_ptr<LogitsProcessor> processor;  // per-request logits hook; may be null
  // False: no speculative proposals for this request even when the engine
  // speculates (SchedulerConfig::speculative). Its output is the same
  // either way; opting out saves the verification's compute when the
  // caller knows its text will not repeat its input.
  bool speculative = true;
  int priority = 0;
  std::optional<Clock::duration> timeout;  // deadline = submission time + timeout
  // The trace the request belongs to (the front end's server span); the
  // engine only hands it back in RequestMetrics.
  TraceContext trace;
};

struct EngineConfig {
  SchedulerConfig scheduler;
  int num_blocks = 0;
  int block_size = 16;
  std::vector<TokenId> eos_token_ids;
  // With an encoder queue attached and encoder windows waiting: the share of
  // max_num_batched_tokens kept from prefill chunks for the windows (decode
  // tokens are never held back). [0, 1).
  double encoder_token_share = 0.5;
  // How the prefix cache hashes full blocks (empty: HashBlock, XXH3).
  BlockHasher block_hasher;
  // Where the prefix cache's changes go, one batch per step that changed
  // it (kv_events.h); null: not recorded. Must outlive the engine.
  KvEventSink* kv_events = nullptr;
  // The host tier (kv_offload.h): this many slots, their copies made by
  // `kv_offload_mover` (the runner; must outlive the engine). 0 or null: no
  // tier.
  int kv_offload_blocks = 0;
  KvBlockMover* kv_offload_mover = nullptr;
  // True: the engine's thread wakes each stream's reader itself, as before
  // the StreamWaker (the baseline bench/stream_wake_bench.cc measures
  // against).
  bool wake_readers_inline = false;
};

// The block hashes the cache and the host tier hold, each ascending.
struct KvCacheContents {
  std::vector<std::uint64_t> cached;
  std::vector<std::uint64_t> offloaded;
};

// Counters for metrics; read from any thread.
struct EngineStats {
  std::atomic<int> running{0};
  std::atomic<int> waiting{0};
  std::atomic<double> kv_usage{0};
  std::atomic<double> peak_kv_usage{0};
  std::atomic<std::uint64_t> preemptions{0};
  std::atomic<std::uint64_t> prefix_queries{0};
  std::atomic<std::uint64_t> prefix_hits{0};
  // The host tier: blocks copied out of the cache, copied back, dropped.
  std::atomic<std::uint64_t> offload_saved{0};
  std::atomic<std::uint64_t> offload_loaded{0};
  std::atomic<std::uint64_t> offload_dropped{0};
  std::atomic<std::uint64_t> offload_skipped{0};  // evicted while every slot was pinned
  std::atomic<std::uint64_t> offload_failed_copies{0};
  std::atomic<int> offload_used{0};
  std::atomic<std::uint64_t> steps{0};
  std::atomic<std::uint64_t> step_tokens{0};
  std::atomic<std::uint64_t> generated_tokens{0};
  std::atomic<std::uint64_t> encoder_windows{0};
  std::atomic<std::uint64_t> encoder_tokens{0};
  // Token slots allocated but not holding a token, at peak usage.
  std::atomic<double> kv_waste_at_peak{0};
  // Speculative decoding (vLLM's spec_decode counters): sequences that
  // carried proposals, proposals verified, proposals accepted, and
  // accepted proposals by their place in the draft (0 = the first).
  std::atomic<std::uint64_t> spec_drafts{0};
  std::atomic<std::uint64_t> spec_draft_tokens{0};
  std::atomic<std::uint64_t> spec_accepted_tokens{0};
  std::array<std::atomic<std::uint64_t>, kMaxSpeculativeTokens> spec_accepted_per_position{};
};

// Per-request timing and token counts, reported once when a request ends.
// Times are in seconds.
struct RequestMetrics {
  RequestId id = 0;
  FinishReason finish_reason = FinishReason::kStop;
  double queue_seconds = 0;                 // submission -> first scheduled
  double ttft_seconds = -1;                 // submission -> first token (-1: none)
  double e2e_seconds = 0;                   // submission -> end
  std::vector<double> inter_token_seconds;  // gaps between consecutive tokens
  std::int64_t prompt_tokens = 0;
  std::int64_t generated_tokens = 0;
  std::int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
  TraceContext trace;              // EngineRequest::trace
};

// Per-step figures, after each forward.
struct StepMetrics {
  std::int64_t scheduled_tokens = 0;  // prefill + decode tokens in the step
  std::int64_t encoder_tokens = 0;    // encoder-window tokens in the step
  int running = 0;
  int waiting = 0;
  double kv_usage = 0;  // 0-1
  std::int64_t preemptions_total = 0;
};

// The hooks the serving layer exports as metrics (Prometheus). Called on the
// engine thread: implementations must be quick and thread-safe.
class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void OnRequestFinished(const RequestMetrics& m) = 0;
  virtual void OnStep(const StepMetrics& m) = 0;
};

class Engine {
 public:
  Engine(EngineConfig config, ModelExecutor& executor);
  // Set before Start(); `observer` must outlive the engine.
  void SetObserver(EngineObserver* observer) { observer_ = observer; }
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Encoder-only work shares the steps: each step runs the decoder's plan,
  // then windows from the attached queues through their runners in the
  // rest of the token budget (at least one window per step while any waits;
  // prefill chunks leave encoder_token_share of the budget to them). With
  // several queues (QA, embeddings), each queue with work gets an even share
  // of that rest (at least one window), then what the others leave, the
  // queue served first turning with each step. Thread-safe, also while
  // running; DetachEncoder waits for a step in progress. The queues are closed (their jobs fail) when the engine
  // stops.
  void AttachEncoder(EncoderQueue* queue, EncoderRunner* runner);
  void DetachEncoder(EncoderQueue* queue);

  // Starts the engine thread. Without Start(), RunUntilIdle() drives the
  // engine from the caller's thread (offline use and tests).
  void Start();
  void Stop();

  // Asserts that the prompt's ids are in the vocabulary (validated by the
  // caller's input processor; a violation is an Internal error), checks the
  // sampling ranges, and queues the request; never waits for the engine
  // thread. The
  // admission verdict arrives on the stream: a refused request (queue full,
  // can never run) finishes at once with FinishReason::kRejected and the
  // reason (RequestStream::WaitAdmission returns it). Thread-safe.
  StatusOr<std::shared_ptr<RequestStream>> Submit(EngineRequest request);
  // Thread-safe; the stream then finishes with FinishReason::kCancelled.
  void Cancel(RequestId id);

  // Processes the inbox and runs steps until no request is left.
  void RunUntilIdle();
  // Processes the inbox and runs one step; false when there was nothing to
  // do. For callers that drive the engine themselves (offline streaming).
  bool RunOnce();

  const EngineStats& stats() const { return stats_; }
  const BlockPool& pool() const { return pool_; }

  // The hashes of the full blocks the prefix cache holds now, ascending,
  // read on the engine thread between steps (so they agree with every KV
  // event batch handed to the sink so far). Thread-safe; Unavailable once
  // the engine stopped.
  StatusOr<std::vector<std::uint64_t>> CachedBlockHashes();
  // The same for the cache and the host tier.
  StatusOr<KvCacheContents> CacheContents();

 private:
  struct InboxItem;
  void Loop();
  void DrainInbox();
  bool Step();  // false if there was nothing to do
  // The decoder's part of a step: forward with sampling, stop conditions.
  void RunPlan(StepPlan& plan);
  // The encoder's part: windows within `budget` tokens; returns their tokens.
  std::int64_t RunEncoder(std::int64_t budget);
  // Ends a live request: reports its metrics, finishes its stream, frees it
  // in the scheduler, and tells the runner at the next step.
  void FinishRequest(RequestId id, FinishReason reason, Status error = Status::Ok());
  // Reports and streams the end of a request the scheduler already freed
  // (deadlines found while scheduling): `r` is its last state.
  void ReportEnd(const Request& r, FinishReason reason, const Status& error);
  // Adds a step's proposals and their verdicts to the stats.
  void CountSpeculation(const StepPlan& plan, const std::map<RequestId, std::vector<TokenId>>& sampled);
  void UpdateStats();
  // Hands the recorded KV cache events, if any, to the sink as one batch.
  void PublishKvEvents();
  // Ends every live request with `status` (after an unexpected exception).
  void FailAll(const Status& status);
  // Appends to a stream by `write(stream, wake)`: the reader is woken at
  // once without a StreamWaker, else at the next WakeReaders.
  template <typename Write>
  void Deliver(const std::shared_ptr<RequestStream>& stream, Write&& write);
  // Hands the wakes collected since the last call to the StreamWaker.
  void WakeReaders();

  EngineConfig config_;
  ModelExecutor& executor_;
  BlockPool pool_;
  Scheduler scheduler_;
  KvEventRecorder kv_recorder_;  // listens to pool_ when config_.kv_events is set
  std::unique_ptr<KvOffloader> offloader_;
  // Runner diffs waiting for the next plan that runs (engine thread only).
  std::vector<SamplingSpec> pending_added_;
  std::vector<RequestId> pending_removed_;
  EngineObserver* observer_ = nullptr;

  std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  std::deque<std::unique_ptr<InboxItem>> inbox_;
  std::atomic<RequestId> next_id_{1};
  std::atomic<bool> stop_{false};
  std::thread thread_;
  bool threaded_ = false;
  std::unique_ptr<StreamWaker> waker_;  // with thread_: wakes the streams' readers
  bool encoder_kick_ = false;           // guarded by inbox_mu_: encoder work arrived

  std::mutex encoder_mu_;  // held by the engine thread during a step
  struct AttachedEncoder {
    EncoderQueue* queue;
    EncoderRunner* runner;
  };
  std::vector<AttachedEncoder> encoders_;  // guarded by encoder_mu_
  std::size_t encoder_turn_ = 0;           // the queue served first in the next step
  EngineStats stats_;
};

}  // namespace ropeserve
