#include "bench/qa_bench.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "bench/workload.h"
#include "server/models/span_model_loader.h"
#include "server/qa/span_scoring.h"
#include "server/qa/windows.h"
#include "server/serving/service_factory.h"
#include "server/tokenizer/tokenizer.h"

namespace ropeserve::bench {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A context of about `chars` characters of numbered facts, and a question
// about one of them.
service::QaRequest MakeRequest(int chars, std::mt19937_64& rng, const QaBenchOptions& o) {
  static const char* kThings[] = {"river", "bridge", "tower", "garden", "harbour", "market", "library", "station"};
  service::QaRequest r;
  int n = 0;
  while (static_cast<int>(r.context.size()) < chars) {
    const char* thing = kThings[rng() % 8];
    r.context += "Fact " + std::to_string(n) + ": the " + thing + " of district " + std::to_string(n) + " is " +
                 std::to_string(rng() % 1000) + " metres long. ";
    ++n;
  }
  r.context.resize(static_cast<std::size_t>(chars));
  r.question = "How long is the " + std::string(kThings[rng() % 8]) + " of district " +
               std::to_string(rng() % static_cast<std::uint64_t>(std::max(n, 1))) + "?";
  r.windows.max_seq_len = o.max_seq_len;
  r.windows.doc_stride = o.doc_stride;
  return r;
}

struct CellResult {
  double seconds = 0;
  std::int64_t windows = 0;
  std::vector<double> latencies;
  std::vector<std::string> answers;
};

// (a) service::QaService with `concurrency` client threads.
StatusOr<CellResult> RunPacked(service::QaService& service, const std::vector<service::QaRequest>& requests,
                               int concurrency) {
  CellResult out;
  out.latencies.resize(requests.size());
  out.answers.resize(requests.size());
  std::atomic<std::size_t> next{0};
  std::atomic<std::int64_t> windows{0};
  Status error;
  std::mutex error_mu;
  const auto start = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&] {
      for (std::size_t i; (i = next++) < requests.size();) {
        const auto t0 = Clock::now();
        auto r = service.Answer(requests[i]);
        out.latencies[i] = Seconds(Clock::now() - t0);
        if (!r.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          error = r.status();
          continue;
        }
        windows += r->windows;
        out.answers[i] = r->answers.empty() ? "" : r->answers[0].text;
      }
    });
  }
  for (auto& t : clients) t.join();
  out.seconds = Seconds(Clock::now() - start);
  out.windows = windows;
  if (!error.ok()) return error;
  return out;
}

// (b) One window per forward, one request after another; latencies as a
// sequential server would give them to `concurrency` closed-loop clients
// (request i is submitted when request i - concurrency finishes).
StatusOr<CellResult> RunSequential(const SpanModel& model, const tok::Tokenizer& tokenizer,
                                   const std::vector<service::QaRequest>& requests, int concurrency) {
  CellResult out;
  std::vector<double> finish;
  const auto start = Clock::now();
  for (const service::QaRequest& r : requests) {
    RS_ASSIGN_OR_RETURN(auto windows, qa::BuildWindows(tokenizer, r.question, r.context, r.windows));
    std::vector<qa::QaWindow> scored;
    for (auto& w : windows) {
      RS_ASSIGN_OR_RETURN(auto logits, model.ForwardWindows({w.ids}, {w.type_ids}));
      qa::QaWindow q = std::move(w.window);
      q.start_logits = std::move(logits[0].start);
      q.end_logits = std::move(logits[0].end);
      scored.push_back(std::move(q));
    }
    RS_ASSIGN_OR_RETURN(auto answers, qa::SelectAnswers(scored, r.context, r.options));
    out.windows += static_cast<std::int64_t>(scored.size());
    out.answers.push_back(answers.empty() ? "" : answers[0].text);
    finish.push_back(Seconds(Clock::now() - start));
  }
  out.seconds = finish.empty() ? 0 : finish.back();
  for (std::size_t i = 0; i < finish.size(); ++i) {
    const double submitted = i < static_cast<std::size_t>(concurrency) ? 0 : finish[i - concurrency];
    out.latencies.push_back(finish[i] - submitted);
  }
  return out;
}

}  // namespace

Status RunQaBench(const QaBenchOptions& o) {
  service::QaServiceOptions so;
  so.max_batch_tokens = o.max_batch_tokens;
  RS_ASSIGN_OR_RETURN(auto service, LoadQaService(o.model, "bench", so, o.dtype));
  RS_ASSIGN_OR_RETURN(auto model, LoadSpanModel(o.model, o.dtype));
  RS_ASSIGN_OR_RETURN(auto tokenizer, tok::Tokenizer::FromPath(o.model));
  if (o.max_seq_len > service->config().max_position_embeddings)
    return InvalidArgument("--max-seq-len exceeds the model's max_position_embeddings");
  json cells = json::array();
  if (!o.json)
    std::printf("%8s %5s %5s %8s | %10s %8s %8s | %10s %8s %8s | %7s %5s\n", "chars", "conc", "reqs", "win/req",
                "packed w/s", "p50 s", "p99 s", "seq w/s", "p50 s", "p99 s", "speedup", "diff");
  for (int chars : o.context_chars) {
    for (int conc : o.concurrency) {
      std::mt19937_64 rng(o.seed + static_cast<std::uint64_t>(chars) * 31 + static_cast<std::uint64_t>(conc));
      const int n = o.requests > 0 ? o.requests : std::max(4, conc);
      std::vector<service::QaRequest> requests;
      for (int i = 0; i < n; ++i) requests.push_back(MakeRequest(chars, rng, o));
      RS_ASSIGN_OR_RETURN(CellResult packed, RunPacked(*service, requests, conc));
      RS_ASSIGN_OR_RETURN(CellResult seq, RunSequential(*model, *tokenizer, requests, conc));
      int differ = 0;
      for (int i = 0; i < n; ++i) differ += packed.answers[i] != seq.answers[i];
      const double pw = static_cast<double>(packed.windows) / packed.seconds;
      const double sw = static_cast<double>(seq.windows) / seq.seconds;
      json cell = {{"context_chars", chars},
                   {"concurrency", conc},
                   {"requests", n},
                   {"windows_per_request", static_cast<double>(packed.windows) / n},
                   {"packed_windows_s", pw},
                   {"packed_requests_s", n / packed.seconds},
                   {"packed_p50_s", Percentile(packed.latencies, 0.5)},
                   {"packed_p99_s", Percentile(packed.latencies, 0.99)},
                   {"sequential_windows_s", sw},
                   {"sequential_requests_s", n / seq.seconds},
                   {"sequential_p50_s", Percentile(seq.latencies, 0.5)},
                   {"sequential_p99_s", Percentile(seq.latencies, 0.99)},
                   {"speedup", pw / sw},
                   {"answers_differ", differ}};
      if (!o.json) {
        std::printf("%8d %5d %5d %8.1f | %10.1f %8.3f %8.3f | %10.1f %8.3f %8.3f | %6.2fx %5d\n", chars, conc, n,
                    cell["windows_per_request"].get<double>(), pw, cell["packed_p50_s"].get<double>(),
                    cell["packed_p99_s"].get<double>(), sw, cell["sequential_p50_s"].get<double>(),
                    cell["sequential_p99_s"].get<double>(), pw / sw, differ);
        std::fflush(stdout);
      }
      cells.push_back(cell);
    }
  }
  if (o.json)
    std::printf("%s\n", json{{"model", o.model},
                             {"dtype", DTypeSafetensorsName(o.dtype)},
                             {"max_batch_tokens", o.max_batch_tokens},
                             {"cells", cells}}
                            .dump()
                            .c_str());
  return Status::Ok();
}

}  // namespace ropeserve::bench
