// `ropeserve loadgen`: a client-side load generator for a running server.
// Sends the same seeded synthetic workload as `ropeserve bench` (random
// token-id prompts, ignore_eos so every request generates its full length)
// over REST (/v1/completions with Server-Sent Events) or gRPC (Generate
// stream), either closed-loop at a fixed concurrency or open-loop with
// Poisson arrivals at a given rate (still capped at --concurrency in
// flight). Reports client-side TTFT, inter-token latency and end-to-end
// latency percentiles, throughput and errors.
#pragma once

#include <cstdint>
#include <string>

#include "server/common/status.h"

namespace ropeserve::bench {

struct LoadgenOptions {
  std::string protocol = "rest";  // rest | grpc
  std::string host = "127.0.0.1";
  int port = 8080;  // the HTTP or the gRPC port
  int num_requests = 64;
  int concurrency = 8;  // requests in flight at most
  double rate = 0;      // requests/s (Poisson); 0 = closed loop
  std::string input_len = "sharegpt";
  std::string output_len = "sharegpt";
  std::uint64_t seed = 0;
  std::string api_key;
  bool json = false;
};

Status RunLoadgen(const LoadgenOptions& options);

}  // namespace ropeserve::bench
