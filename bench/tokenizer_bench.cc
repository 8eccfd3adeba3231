// Single-thread encode throughput of a tokenizer.json on a text corpus,
// line by line (the way a server tokenizes requests).
//
//   tokenizer_bench --tokenizer DIR [--corpus FILE | --make-corpus FILE --mb 10]
//
// --make-corpus writes a deterministic ~N MB mixed corpus (the 160 reference
// strings: prose, code, numbers, CJK, Arabic, Hindi, Thai, emoji, long
// words... shuffled with a fixed seed) so that runs are comparable with
// other implementations on the same bytes.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "server/tokenizer/tokenizer.h"

namespace {

int Usage() {
  std::fprintf(
      stderr,
      "usage: tokenizer_bench --tokenizer DIR --corpus FILE [--repeat N]\n"
      "       tokenizer_bench --make-corpus FILE --strings tests/data/golden/tokenizer_corpus.json [--mb 10]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer, corpus, make, strings;
  double mb = 10;
  int repeat = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--tokenizer")
      tokenizer = next();
    else if (a == "--corpus")
      corpus = next();
    else if (a == "--make-corpus")
      make = next();
    else if (a == "--strings")
      strings = next();
    else if (a == "--mb")
      mb = std::atof(next().c_str());
    else if (a == "--repeat")
      repeat = std::atoi(next().c_str());
    else
      return Usage();
  }
  if (!make.empty()) {
    if (strings.empty()) return Usage();
    std::ifstream in(strings);
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.contains("items")) {
      std::fprintf(stderr, "error: %s is not the reference corpus JSON\n", strings.c_str());
      return 1;
    }
    std::vector<std::string> lines;
    for (const auto& item : j["items"]) {
      std::istringstream ss(item["text"].get<std::string>());
      std::string line;
      while (std::getline(ss, line)) {
        if (!line.empty()) lines.push_back(line);
      }
    }
    std::mt19937_64 rng(20261130);
    std::ofstream out(make, std::ios::binary);
    size_t written = 0;
    const size_t target = static_cast<size_t>(mb * 1024 * 1024);
    while (written < target) {
      const std::string& l = lines[rng() % lines.size()];
      out << l << '\n';
      written += l.size() + 1;
    }
    std::printf("wrote %s: %.1f MB, %zu distinct lines\n", make.c_str(), written / 1048576.0, lines.size());
    return 0;
  }
  if (tokenizer.empty() || corpus.empty()) return Usage();
  auto t = ropeserve::tok::Tokenizer::FromPath(tokenizer);
  if (!t.ok()) {
    std::fprintf(stderr, "error: %s\n", t.status().ToString().c_str());
    return 1;
  }
  std::ifstream in(corpus, std::ios::binary);
  std::vector<std::string> lines;
  size_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    bytes += line.size() + 1;
    lines.push_back(std::move(line));
  }
  double best = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < std::max(repeat, 1); ++r) {
    tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& l : lines) {
      auto e = (*t)->Encode(l, false);
      if (!e.ok()) {
        std::fprintf(stderr, "error: %s\n", e.status().ToString().c_str());
        return 1;
      }
      tokens += e->ids.size();
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf(
      "{\"tokenizer\": \"%s\", \"corpus_mb\": %.2f, \"lines\": %zu, \"tokens\": %zu, \"seconds\": %.3f, "
      "\"mb_per_s\": %.2f, \"tokens_per_s\": %.0f}\n",
      tokenizer.c_str(), bytes / 1048576.0, lines.size(), tokens, best, bytes / 1048576.0 / best, tokens / best);
  return 0;
}
