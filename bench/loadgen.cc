#include "bench/loadgen.h"

#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "bench/workload.h"
#include "proto/ropeserve/v1/ropeserve.grpc.pb.h"

namespace ropeserve::bench {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What one request saw, on the client's clock.
struct Sample {
  bool ok = false;
  std::string error;
  double ttft = -1;         // send -> first token
  double e2e = 0;           // send -> end of stream
  std::vector<double> itl;  // gaps between token-bearing messages
  std::int64_t tokens = 0;
};

// Records the arrival of `n` tokens at time `t` into `s`.
void OnTokens(Sample& s, Clock::time_point start, Clock::time_point& last, std::int64_t n) {
  if (n <= 0) return;
  const auto now = Clock::now();
  if (s.ttft < 0) {
    s.ttft = std::chrono::duration<double>(now - start).count();
  } else {
    s.itl.push_back(std::chrono::duration<double>(now - last).count());
  }
  last = now;
  s.tokens += n;
}

Sample SendRest(const LoadgenOptions& o, const std::vector<TokenId>& prompt, std::int64_t max_tokens) {
  Sample s;
  httplib::Client cli(o.host, o.port);
  cli.set_read_timeout(600, 0);
  json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"ignore_eos", true},
               {"temperature", 0}, {"stream", true},           {"return_token_ids", true}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  if (!o.api_key.empty()) req.set_header("Authorization", "Bearer " + o.api_key);
  std::string buffer;
  const auto start = Clock::now();
  auto last = start;
  bool done = false;
  req.content_receiver = [&](const char* data, size_t len, std::uint64_t, std::uint64_t) {
    buffer.append(data, len);
    // Events end with a blank line.
    for (std::size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      json j = json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {
        s.error = j["error"].value("message", "error");
        continue;
      }
      const auto& c = j["choices"];
      if (c.is_array() && !c.empty() && c[0].contains("token_ids") && c[0]["token_ids"].is_array())
        OnTokens(s, start, last, static_cast<std::int64_t>(c[0]["token_ids"].size()));
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!cli.send(req, res, err)) {
    s.error = "HTTP error " + std::to_string(static_cast<int>(err));
    return s;
  }
  s.e2e = Since(start);
  if (res.status != 200) {
    s.error = "HTTP " + std::to_string(res.status);
  } else if (done && s.error.empty()) {
    s.ok = true;
  } else if (s.error.empty()) {
    s.error = "stream ended without [DONE]";
  }
  return s;
}

Sample SendGrpc(const LoadgenOptions& o, v1::Inference::Stub& stub, const std::vector<TokenId>& prompt,
                std::int64_t max_tokens) {
  Sample s;
  v1::GenerateRequest req;
  for (auto id : prompt) req.add_prompt_ids(id);
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  grpc::ClientContext ctx;
  if (!o.api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + o.api_key);
  const auto start = Clock::now();
  auto last = start;
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse m;
  while (reader->Read(&m)) OnTokens(s, start, last, m.token_ids_size());
  grpc::Status st = reader->Finish();
  s.e2e = Since(start);
  s.ok = st.ok();
  if (!st.ok()) s.error = st.error_message();
  return s;
}

}  // namespace

Status RunLoadgen(const LoadgenOptions& o) {
  if (o.protocol != "rest" && o.protocol != "grpc") return InvalidArgument("--protocol must be rest or grpc");
  if (o.concurrency < 1 || o.num_requests < 1) return InvalidArgument("--concurrency and --num-requests must be >= 1");
  if (!(o.rate >= 0)) return InvalidArgument("--rate must not be negative");
  // The server's vocabulary and context bound the synthetic prompts.
  std::int64_t vocab = 0, max_len = 0;
  std::unique_ptr<v1::Inference::Stub> stub;
  if (o.protocol == "rest") {
    httplib::Client cli(o.host, o.port);
    httplib::Headers h;
    if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
    auto r = cli.Get("/v1/info", h);
    if (!r || r->status != 200)
      return FailedPrecondition("cannot read http://" + o.host + ":" + std::to_string(o.port) + "/v1/info");
    json info = json::parse(r->body, nullptr, false);
    if (info.is_discarded() || !info.contains("vocab_size")) return FailedPrecondition("unexpected /v1/info answer");
    vocab = info["vocab_size"].get<std::int64_t>();
    max_len = info["max_model_len"].get<std::int64_t>();
  } else {
    stub = v1::Inference::NewStub(
        grpc::CreateChannel(o.host + ":" + std::to_string(o.port), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!o.api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + o.api_key);
    v1::GetModelInfoResponse info;
    grpc::Status st = stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
    if (!st.ok() || info.models_size() == 0) return FailedPrecondition("GetModelInfo failed: " + st.error_message());
    vocab = info.models(0).vocab_size();
    max_len = info.models(0).max_model_len();
  }
  RS_ASSIGN_OR_RETURN(Workload w, MakeWorkload(o.input_len, o.output_len, o.num_requests, o.seed, vocab,
                                               std::min<std::int64_t>(max_len, 4096)));

  // Arrival times: all at 0 (closed loop) or a seeded Poisson process.
  std::vector<double> arrival(w.prompts.size(), 0.0);
  if (o.rate > 0) {
    std::mt19937_64 rng(o.seed + 1);
    std::exponential_distribution<double> gap(o.rate);
    double t = 0;
    for (auto& a : arrival) a = t += gap(rng);
  }
  std::vector<Sample> samples(w.prompts.size());
  std::atomic<std::size_t> next{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> workers;
  for (int k = 0; k < std::min<int>(o.concurrency, o.num_requests); ++k) {
    workers.emplace_back([&] {
      for (std::size_t i; (i = next++) < w.prompts.size();) {
        std::this_thread::sleep_until(
            t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival[i])));
        samples[i] = o.protocol == "rest" ? SendRest(o, w.prompts[i], w.output_lens[i])
                                          : SendGrpc(o, *stub, w.prompts[i], w.output_lens[i]);
      }
    });
  }
  for (auto& t : workers) t.join();
  const double seconds = Since(t0);

  std::vector<double> ttft, itl, e2e;
  std::int64_t tokens = 0, errors = 0;
  std::string first_error;
  for (const auto& s : samples) {
    if (!s.ok) {
      ++errors;
      if (first_error.empty()) first_error = s.error;
      continue;
    }
    if (s.ttft >= 0) ttft.push_back(s.ttft);
    itl.insert(itl.end(), s.itl.begin(), s.itl.end());
    e2e.push_back(s.e2e);
    tokens += s.tokens;
  }
  std::int64_t expected = 0;
  for (auto n : w.output_lens) expected += n;
  json out = {{"protocol", o.protocol},
              {"num_requests", o.num_requests},
              {"concurrency", o.concurrency},
              {"rate", o.rate},
              {"seconds", seconds},
              {"requests_per_s", static_cast<double>(o.num_requests - errors) / seconds},
              {"output_tok_s", static_cast<double>(tokens) / seconds},
              {"expected_output_tokens", expected},
              {"output_tokens", tokens},
              {"errors", errors},
              {"ttft_p50_ms", 1e3 * Percentile(ttft, 0.5)},
              {"ttft_p90_ms", 1e3 * Percentile(ttft, 0.9)},
              {"ttft_p99_ms", 1e3 * Percentile(ttft, 0.99)},
              {"itl_p50_ms", 1e3 * Percentile(itl, 0.5)},
              {"itl_p90_ms", 1e3 * Percentile(itl, 0.9)},
              {"itl_p99_ms", 1e3 * Percentile(itl, 0.99)},
              {"e2e_p50_ms", 1e3 * Percentile(e2e, 0.5)},
              {"e2e_p90_ms", 1e3 * Percentile(e2e, 0.9)},
              {"e2e_p99_ms", 1e3 * Percentile(e2e, 0.99)}};
  if (errors > 0) out["first_error"] = first_error;
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("%s loadgen: %d requests, concurrency %d, %s\n", o.protocol.c_str(), o.num_requests, o.concurrency,
                o.rate > 0 ? ("Poisson " + std::to_string(o.rate) + " req/s").c_str() : "closed loop");
    std::printf("  %.2f s, %.2f req/s, %.1f output tok/s, %lld errors%s%s\n", seconds,
                out["requests_per_s"].get<double>(), out["output_tok_s"].get<double>(), static_cast<long long>(errors),
                errors ? ": " : "", first_error.c_str());
    for (const char* m : {"ttft", "itl", "e2e"}) {
      const std::string p = m;
      std::printf("  %-4s p50 %8.1f ms  p90 %8.1f ms  p99 %8.1f ms\n", m, out[p + "_p50_ms"].get<double>(),
                  out[p + "_p90_ms"].get<double>(), out[p + "_p99_ms"].get<double>());
    }
  }
  return Status::Ok();
}

}  // namespace ropeserve::bench
