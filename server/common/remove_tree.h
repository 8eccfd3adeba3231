// Removes a directory tree (depth first, symbolic links removed, never
// followed). Header-only, so that the header-only test helpers (the TSan
// drivers' ScratchDir) can use it without linking a library.
//
// Why not std::filesystem::remove_all: on the GPU machine's toolchain
// (PyTorch 2.11's LibTorch beside the system libstdc++) it called through a
// null pointer inside libstdc++, every process that removed a directory
// died there (scripts/gpu-check's gdb stack, docs/gpu.md), and the walk is
// a few lines of POSIX nftw.
#pragma once

#include <ftw.h>
#include <stdio.h>

#include <string>

namespace ropeserve {

// Best effort: what cannot be removed is left in place (the callers are
// destructors and test cleanup, with nothing to do about it).
inline void RemoveTree(const std::string& path) {
  ::nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        ::remove(p);
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace ropeserve
