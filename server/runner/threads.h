// Compute thread settings, torch-free so that main() needs no torch headers.
#pragma once

namespace ropeserve {

// Sets LibTorch's intra-op thread count (LibTorch otherwise uses one thread
// in an embedding program). n <= 0 means "all cores".
void SetComputeThreads(int n);
int ComputeThreads();

}  // namespace ropeserve
