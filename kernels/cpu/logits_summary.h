// What the sampler needs from each row of a step's logits, on the CPU: the
// row's max, the lowest id holding it, and its logsumexp (the sampler's
// SummarizeLogits, server/sampler/logits_summary.h, calls this for float32
// rows on a CPU; host_sampler.h says why three numbers a row suffice for
// greedy rows). Torch-free.
//
// Why a kernel: LibTorch's max(1) and logsumexp(1) are five ops, four
// temporaries of the row's size, and each op over a 152k-entry row is an
// OpenMP region. At batch 1 on this project's 2-core machines those
// regions woke LibTorch's OpenMP worker on every decode step while the
// kernels' own pool (thread_pool.h) was spinning for the next matrix: three
// busy threads on two cores, 0.4-0.7 ms a step (docs/benchmarks.md). Here
// one thread reads a row twice (max and argmax; then the exponentials),
// rows in parallel on the kernels' pool; no temporaries.
//
// Arithmetic: max and argmax are exact (the lowest id of the max; a row
// holding a NaN gives NaN and its first NaN's id, as LibTorch's max does).
// logsumexp = max + log(sum exp(x - max)) with the exponentials in float32
// (kernels/cpu/avx512_math.h's Exp, within 2 ulp), summed and logged in
// float64, rounded once: within 2 ulp of the exponentials' sum plus one
// rounding of the result, i.e. |error| <= 3 * 2^-23 + |lse| * 2^-24.
// Entries of -inf add nothing; a row of -inf gives -inf, a row holding +inf
// (and no NaN) +inf, as LibTorch's logsumexp does.
#pragma once

#include <cstdint>

namespace ropeserve::cpu {

// Rows [0, rows) of row-major float32 logits [rows, n], n >= 1: each row's
// logsumexp, max and lowest argmax, rows in parallel on the kernels' pool
// (a row a task: a row's result does not depend on the thread count).
void SummarizeRows(const float* logits, std::int64_t rows, std::int64_t n, float* logsumexp, float* max,
                   std::int64_t* argmax);

}  // namespace ropeserve::cpu
