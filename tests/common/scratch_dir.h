// A fresh directory under $TMPDIR, removed when the object goes away.
// Header-only, so that tests built on their own (the TSan drivers) need no
// other test helper.
#pragma once

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace ropeserve::testing {

class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/ropeserve-test-XXXXXX";
    char* made = ::mkdtemp(tmpl.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  // (nftw, not std::filesystem::remove_all: on the GPU machine's
  // toolchain that one calls through a null pointer inside libstdc++ —
  // scripts/gpu-check's stack of the "teardown crash" — and it is only a
  // directory walk.)
  ~ScratchDir() {
    ::nftw(
        path_.c_str(),
        [](const char* p, const struct stat*, int, struct FTW*) {
          ::remove(p);
          return 0;
        },
        16, FTW_DEPTH | FTW_PHYS);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace ropeserve::testing
