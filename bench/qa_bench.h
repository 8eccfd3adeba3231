// `ropeserve bench-qa`: extractive-QA throughput and latency, offline. For
// each context length and client concurrency, the same seeded requests run
// (a) through service::QaService, which packs the windows of concurrent requests into
// forwards of at most max_batch_tokens tokens (the engine's budget), and
// (b) through a sequential baseline that runs one window per forward, one
// request after another (how Hugging Face's pipeline is usually served), in
// the same process. Reports windows/s, requests/s and p50/p99 latency of
// both, and how many answers differ between them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/checkpoint/dtype.h"
#include "server/common/status.h"

namespace ropeserve::bench {

struct QaBenchOptions {
  std::string model;
  std::vector<int> context_chars = {512, 4096, 32768};
  std::vector<int> concurrency = {1, 32};
  int requests = 0;  // per cell; 0 = max(4, concurrency)
  int max_seq_len = 384;
  int doc_stride = 128;
  std::int64_t max_batch_tokens = 2048;
  std::uint64_t seed = 0;
  DType dtype = DType::kF32;
  bool json = false;
};

Status RunQaBench(const QaBenchOptions& options);

}  // namespace ropeserve::bench
