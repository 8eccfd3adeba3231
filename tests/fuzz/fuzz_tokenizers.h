// The tokenizers the fuzz targets run (loaded once, in LLVMFuzzerInitialize,
// before libFuzzer's per-input timeout starts).
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "server/tokenizer/tokenizer.h"

inline std::vector<std::shared_ptr<const ropeserve::tok::Tokenizer>>& FuzzTokenizers() {
  static std::vector<std::shared_ptr<const ropeserve::tok::Tokenizer>> ts = [] {
    std::vector<std::shared_ptr<const ropeserve::tok::Tokenizer>> v;
    const char* dir = std::getenv("ROPESERVE_TEST_DATA");
    const std::string data = dir ? dir : "tests/data";
    for (const char* name : {"tokenizers/llama2", "tokenizers/synthetic/bert", "tokenizers/synthetic/unigram",
                             "tokenizers/synthetic/roberta", "tokenizers/synthetic/wordlevel",
                             "tokenizers/synthetic/bert_processing", "tokenizers/qwen3", "tokenizers/llama3"}) {
      auto t = ropeserve::tok::Tokenizer::FromPath(data + "/" + name);
      if (!t.ok()) std::abort();
      v.push_back(*t);
    }
    return v;
  }();
  return ts;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  FuzzTokenizers();
  return 0;
}
