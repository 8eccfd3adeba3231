// Compute thread settings, torch-free so that main() needs no torch headers.
#pragma once

namespace ropeserve {

// Sets the compute threads: the kernels' pool's (kernels/cpu/thread_pool.h,
// where every parallel hot path runs: projections, attention, norms,
// encoder windows), and LibTorch's OpenMP threads to one. n <= 0 means the
// CPUs this process may use (server/common/cpu_budget.h: its affinity mask
// and cgroup CPU quota), not the machine's cores.
void SetComputeThreads(int n);
int ComputeThreads();

// Keeps freed tensor memory in the process. Every op allocates its output
// (MBs for a 384-token window) and frees it soon after; with glibc's
// defaults such blocks go back to the OS and are page-faulted in again on
// the next op (measured: 20% of a QA forward in page faults, and a forward
// up to 1.6x slower depending on the allocation pattern). Raises the mmap
// threshold to 256 MiB and the trim threshold to 512 MiB, and keeps one
// malloc arena, so that resident memory does not creep with the number of
// connection threads and no thread's tensors live in heaps glibc unmaps
// when they are free (mallopt; threads.cc says why). Call once at
// start-up, before threads start. Environment variables
// MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES, and
// MALLOC_ARENA_MAX for the arena cap, when set, win.
void TuneAllocator();

}  // namespace ropeserve
