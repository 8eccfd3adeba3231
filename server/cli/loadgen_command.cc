// `ropeserve loadgen`: see bench/loadgen.h.
#include <memory>

#include "bench/loadgen.h"
#include "server/cli/commands.h"

namespace ropeserve::cli {

Runner AddLoadgen(CLI::App& app) {
  auto o = std::make_shared<bench::LoadgenOptions>();
  CLI::App* sub = app.add_subcommand(
      "loadgen",
      "Load generator for a running server: streaming requests over REST (SSE) or gRPC, closed loop or "
      "Poisson arrivals; reports client-side TTFT, inter-token and end-to-end latency percentiles");
  sub->add_option("--protocol", o->protocol, "rest (/v1/completions, SSE) or grpc (Inference.Generate)")
      ->capture_default_str()
      ->check(CLI::IsMember({"rest", "grpc"}));
  sub->add_option("--host", o->host, "Server address")->capture_default_str();
  sub->add_option("--port", o->port, "The server's HTTP port (rest) or gRPC port (grpc)")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  sub->add_option("--num-requests", o->num_requests)->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub->add_option("--concurrency", o->concurrency, "Requests in flight at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub->add_option("--rate", o->rate, "Poisson arrivals per second (0 = closed loop at --concurrency)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  sub->add_option("--input-len", o->input_len, "Prompt lengths: N, uniform:A:B or sharegpt")->capture_default_str();
  sub->add_option("--output-len", o->output_len, "Output lengths: N, uniform:A:B or sharegpt")->capture_default_str();
  sub->add_option("--seed", o->seed)->capture_default_str();
  sub->add_option("--api-key", o->api_key, "Sent as 'Authorization: Bearer KEY'")->envname("ROPESERVE_API_KEY");
  sub->add_flag("--json", o->json, "Print one JSON object");
  return [o] {
    Status s = bench::RunLoadgen(*o);
    return s.ok() ? 0 : Fail(s.ToString());
  };
}

}  // namespace ropeserve::cli
