// Synthetic workloads shared by `ropeserve bench` (offline, in-process) and
// `ropeserve loadgen` (over the network), so both measure the same requests.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "server/common/status.h"
#include "server/engine/block_pool.h"

namespace ropeserve::bench {

struct Workload {
  std::vector<std::vector<TokenId>> prompts;  // random ids of the vocabulary
  std::vector<std::int64_t> output_lens;
};

// A length distribution: "128", "uniform:A:B", or "sharegpt" (lognormal
// fitted to the shape of ShareGPT conversations: many short turns, a long
// tail; prompts median ~ 150 tokens, outputs median ~ 120).
StatusOr<std::function<std::int64_t(std::mt19937_64&)>> ParseDist(const std::string& spec, bool is_input);

// `num_requests` seeded requests; prompt + output fit in `max_len`. The
// prompts are random ids, or with `document` (a tokenized text) windows of
// it at seeded offsets (at most the document's length): natural text, with
// the repetitions prompt-lookup speculation proposes from.
StatusOr<Workload> MakeWorkload(const std::string& input_len, const std::string& output_len, int num_requests,
                                std::uint64_t seed, std::int64_t vocab, std::int64_t max_len,
                                const std::vector<TokenId>* document = nullptr);

// Static batching's plan for a workload (Hugging Face `generate` style):
// batches of `batch_size` requests in order, prompts left-padded to the
// batch's longest, every member decoding until the batch's longest output.
// A padded sequence is longer than its request, so each slot holds
// `tokens_per_sequence` = the longest padded prompt + its batch's longest
// output over all batches, capped at the model's position limit; a batch
// whose padded length would pass the limit runs fewer steps, and `useful`
// counts only the tokens requests actually get.
struct StaticBatch {
  std::size_t begin = 0, end = 0;  // request indices [begin, end)
  std::int64_t pad_to = 0;         // prompt length after padding
  std::int64_t steps = 0;          // decode steps (tokens per member)
};
struct StaticPlan {
  std::vector<StaticBatch> batches;
  std::int64_t tokens_per_sequence = 1;
  std::int64_t useful = 0;  // sum over requests of min(output length, its batch's steps)
};
StaticPlan PlanStaticBatches(const Workload& w, int batch_size, std::int64_t position_limit);

// The q-quantile (0-1) with linear interpolation; 0 for an empty sample.
double Percentile(std::vector<double> v, double q);

}  // namespace ropeserve::bench
