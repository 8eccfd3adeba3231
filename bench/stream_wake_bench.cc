// The engine thread's cost of waking the readers of its streams (figures in
// docs/benchmarks.md, "... readers woken off the engine's thread"). A fake
// model whose step sleeps (a GPU worker's host waits on the device, its
// cores free) serves N streaming requests at once; N reader threads, as the
// API's connection threads, block in RequestStream::Next and submit the next
// request when theirs ends. Reported: the step's wall time against the
// sleep, and tokens/s, with the wakes on the engine's thread
// (EngineConfig::wake_readers_inline, the old way) and on the StreamWaker's.
//
//   build/stream_wake_bench [step_us=2000] [tokens=100] [streams...=64 256]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "server/engine/engine.h"

using namespace ropeserve;

namespace {

// Every sequence's next token is 1; a step takes `step` of sleep.
class SleepingModel : public ModelExecutor {
 public:
  explicit SleepingModel(std::chrono::microseconds step) : step_(step) {}
  StatusOr<StepOutput> Execute(const StepPlan& plan) override {
    std::this_thread::sleep_for(step_);
    StepOutput out;
    for (const auto& s : plan.sequences)
      if (s.needs_logits) out.tokens.push_back(SampledToken{s.request_id, 1, 0.0, {}});
    ++steps;
    return out;
  }
  std::int64_t vocab_size() const override { return 8; }
  std::atomic<std::int64_t> steps{0};

 private:
  std::chrono::microseconds step_;
};

struct Result {
  double step_ms = 0, tok_s = 0;
};

Result Run(int streams, int tokens, std::chrono::microseconds step, bool inline_wakes) {
  SleepingModel model(step);
  EngineConfig c;
  c.block_size = 16;
  c.num_blocks = streams * ((tokens + 2) / 16 + 2);
  c.scheduler.max_model_len = tokens + 2;
  c.scheduler.max_num_seqs = streams;
  c.scheduler.max_num_batched_tokens = 4 * streams;
  c.wake_readers_inline = inline_wakes;
  Engine engine(c, model);
  engine.Start();
  const int rounds = 3;  // requests per reader, one after the other
  std::atomic<std::int64_t> received{0};
  std::atomic<int> failures{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> readers;
  for (int i = 0; i < streams; ++i) {
    readers.emplace_back([&] {
      for (int r = 0; r < rounds; ++r) {
        EngineRequest req;
        req.prompt = {1};
        req.max_tokens = tokens;
        req.stop.ignore_eos = true;
        auto s = engine.Submit(req);
        if (!s.ok()) {
          ++failures;
          return;
        }
        for (;;) {
          StreamChunk chunk = (*s)->Next();
          received += static_cast<std::int64_t>(chunk.tokens.size());
          if (chunk.finished) break;
        }
      }
    });
  }
  for (auto& t : readers) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  engine.Stop();
  if (failures > 0 || received != static_cast<std::int64_t>(streams) * rounds * tokens)
    std::fprintf(stderr, "warning: %d failed submits, %lld of %lld tokens\n", failures.load(),
                 static_cast<long long>(received.load()), static_cast<long long>(streams) * rounds * tokens);
  return {1e3 * seconds / static_cast<double>(std::max<std::int64_t>(model.steps, 1)),
          static_cast<double>(received) / seconds};
}

}  // namespace

int main(int argc, char** argv) {
  const auto step = std::chrono::microseconds(argc > 1 ? std::atoi(argv[1]) : 2000);
  const int tokens = argc > 2 ? std::atoi(argv[2]) : 100;
  std::vector<int> counts;
  for (int i = 3; i < argc; ++i) counts.push_back(std::atoi(argv[i]));
  if (counts.empty()) counts = {64, 256};
  if (step.count() < 0 || tokens < 1 || tokens > 100000) {
    std::fprintf(stderr, "usage: stream_wake_bench [step_us >= 0] [tokens 1-100000] [streams ...]\n");
    return 2;
  }
  std::printf("step sleep %.2f ms, %d tokens a request\n", static_cast<double>(step.count()) / 1e3, tokens);
  std::printf("%8s  %-22s %10s %10s\n", "streams", "wakes", "step ms", "tok/s");
  for (int n : counts) {
    if (n < 1 || n > 4096) {
      std::fprintf(stderr, "streams must be 1-4096: %d\n", n);
      return 2;
    }
    for (bool inline_wakes : {true, false}) {
      const Result r = Run(n, tokens, step, inline_wakes);
      std::printf("%8d  %-22s %10.3f %10.0f\n", n, inline_wakes ? "engine thread (before)" : "StreamWaker", r.step_ms,
                  r.tok_s);
    }
  }
  return 0;
}
