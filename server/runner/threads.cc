#include "server/runner/threads.h"

#include <ATen/Parallel.h>

#include <thread>

namespace ropeserve {

void SetComputeThreads(int n) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(n);
}

int ComputeThreads() { return at::get_num_threads(); }

}  // namespace ropeserve
