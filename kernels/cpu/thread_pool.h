// The kernels' thread pool: at::parallel_for's contract (disjoint chunks
// that cover the range, exceptions back to the caller, nested calls
// inline) on threads that share a job's chunks dynamically and wait for
// the next kernel by spinning briefly instead of sleeping.
//
// Why not OpenMP (what at::parallel_for runs on): libgomp keeps one team of
// threads per thread that starts parallel regions. The server loads weights
// on the main thread and computes on the engine's thread, so it holds more
// OpenMP threads than cores, and then libgomp "throttles": an idle team
// member spins only ~100 iterations and sleeps in the kernel, so every
// kernel of a decode step (~8 per layer, each a parallel region) would pay
// a futex wake-up and the worker's way back onto a core. These workers spin
// for a bounded time (the kernel configuration's pool_spin_us, default
// 200 us, yielding the core while they spin) before they sleep, which
// covers the gaps between the kernels of one step; between steps they
// sleep. (The pool against OpenMP, measured: docs/benchmarks.md.)
//
// On a shared node (other processes busy on our cores, a CPU quota) a
// thread loses its core for a scheduler time slice (milliseconds) at any
// moment. A static split (one chunk per thread, as OpenMP's and the first
// version of this pool's) then makes every kernel wait for the slowest
// thread. Here a job is cut into up to kChunksPerThread chunks per thread,
// claimed one at a time by whichever thread is running, so a thread
// without its core simply claims fewer; a late worker claims nothing once
// its job has ended, and the caller waits only for chunks that were
// claimed, spinning briefly, then sleeping (so that a worker sharing its
// core gets it). Chunk boundaries do not depend on which thread runs them,
// and every kernel's result is a function of its chunk's indices alone.
// Torch-free on purpose: the engine's headers include it.
#pragma once

#include <cstdint>

namespace ropeserve::cpu {

namespace detail {
using RangeFn = void (*)(const void* ctx, std::int64_t begin, std::int64_t end);
// ParallelFor's LibTorch side (parallel_for.cc): the thread count and
// OpenMP nesting; then PoolParallelFor.
void ParallelForImpl(std::int64_t begin, std::int64_t end, std::int64_t grain, RangeFn fn, const void* ctx);
// The pool itself, torch-free (thread_pool.cc): the chunking described at
// ParallelFor for `threads` threads; inline when nested in another
// PoolParallelFor. Its ThreadSanitizer test (tests/kernels/thread_pool_tsan.cc)
// calls it directly, so that only instrumented code runs there.
void PoolParallelFor(std::int64_t begin, std::int64_t end, std::int64_t grain, std::int64_t threads, RangeFn fn,
                     const void* ctx);
// How many chunks n indices are cut into for `threads` threads: 1 when
// n <= grain, n <= 1 or threads <= 1; else min(ceil(n / grain),
// threads * kChunksPerThread).
inline constexpr std::int64_t kChunksPerThread = 8;
std::int64_t PoolChunks(std::int64_t n, std::int64_t grain, std::int64_t threads);
}  // namespace detail

// The compute threads the pool uses (the caller and PoolThreads() - 1
// workers): set once at start-up (server/serving/threads.h's
// SetComputeThreads, from --threads and the process's CPU budget); until
// then the machine's hardware threads. LibTorch's own OpenMP threads are
// set to one beside it: every parallel hot path runs here.
void SetPoolThreads(int n);
int PoolThreads();

// Calls f(b, e) on disjoint chunks that cover [begin, end): with T =
// PoolThreads(),
// n = end - begin and t = PoolChunks(n, grain, T), chunk i is
// [begin + i * c, min(end, begin + (i + 1) * c)) with c = ceil(n / t), each
// run by whichever of the caller and T - 1 workers claims it first;
// everything runs on the calling thread when t is 1 or the call is nested
// in another ParallelFor or OpenMP region. Concurrent callers take turns.
// An exception thrown by f is rethrown here (the first one) after every
// chunk has finished.
template <typename F>
void ParallelFor(std::int64_t begin, std::int64_t end, std::int64_t grain, const F& f) {
  detail::ParallelForImpl(
      begin, end, grain, [](const void* ctx, std::int64_t b, std::int64_t e) { (*static_cast<const F*>(ctx))(b, e); },
      &f);
}

}  // namespace ropeserve::cpu
