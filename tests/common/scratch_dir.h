// A fresh directory under $TMPDIR, removed when the object goes away.
// Header-only, so that tests built on their own (the TSan drivers) need no
// other test helper.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "server/common/remove_tree.h"

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
  ~ScratchDir() { RemoveTree(path_); }  // not remove_all: server/common/remove_tree.h says why
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace ropeserve::testing
