// Structured-output costs outside the model (figures in docs/benchmarks.md):
// building the vocabulary's byte table, compiling a JSON Schema, a token
// mask computed for a new automaton state (one walk over the sorted
// vocabulary), and a mask applied from the cache, on a real vocabulary.
//
//   build/structured_bench [tokenizer dir] [schema.json ...]
// Defaults: tests/data/tokenizers/qwen3 and bench/schemas/30_properties.json.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "server/common/json_file.h"
#include "server/structured/grammar.h"
#include "server/tokenizer/tokenizer.h"

using namespace ropeserve;
using Clock = std::chrono::steady_clock;

namespace {

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Run(const std::string& tokenizer_dir, const std::vector<std::string>& schemas) {
  auto t = tok::Tokenizer::FromPath(tokenizer_dir);
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
    return 1;
  }
  const std::size_t logits = (*t)->VocabSize();
  const auto eos = (*t)->TokenToId("<|im_end|>").value_or(0);
  auto v0 = Clock::now();
  auto vocab = structured::TokenVocabulary::FromTokenizer(**t, logits, {static_cast<TokenId>(eos)});
  std::printf("vocabulary: %zu tokens, byte table built in %.1f ms\n", logits, Ms(Clock::now() - v0));
  for (const std::string& path : schemas) {
    auto text = ReadTextFile(path);
    if (!text.ok()) {
      std::fprintf(stderr, "%s\n", text.status().message().c_str());
      return 1;
    }
    structured::Constraint c{structured::Constraint::Kind::kJsonSchema, *text, {}, "schema"};
    std::vector<double> compile;
    std::shared_ptr<structured::CompiledGrammar> g;
    for (int i = 0; i < 10; ++i) {
      const auto s = Clock::now();
      auto r = structured::CompiledGrammar::Compile(c, vocab);
      compile.push_back(Ms(Clock::now() - s));
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", path.c_str(), r.status().ToString().c_str());
        return 1;
      }
      g = std::move(*r);
    }
    // Random walks (random logits): the first mask of each state walks the
    // vocabulary; later visits hit the cache.
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.f, 3.f);
    std::vector<double> step_ms;
    std::size_t steps = 0;
    for (int w = 0; w < 5; ++w) {
      structured::GrammarProcessor p(g, 400);
      std::vector<TokenId> generated;
      std::vector<float> row(logits);
      while (generated.size() < 400) {
        for (float& x : row) x = normal(rng);
        const auto s = Clock::now();
        p.Process(generated, row);
        step_ms.push_back(Ms(Clock::now() - s));
        const auto best = static_cast<TokenId>(std::max_element(row.begin(), row.end()) - row.begin());
        generated.push_back(best);
        ++steps;
        if (best == static_cast<TokenId>(eos)) break;
      }
    }
    double total_ms = 0;
    for (double x : step_ms) total_ms += x;
    std::sort(step_ms.begin(), step_ms.end());
    std::printf(
        "%s: %zu automaton states; compile median %.1f ms (min %.1f); %zu steps: mask p50 %.3f ms, p90 %.3f ms, "
        "max %.1f ms (a new state's vocabulary walk); mean %.3f ms/step; %.1f MiB of masks cached\n",
        path.c_str(), g->dfa().num_states(), Median(compile), *std::min_element(compile.begin(), compile.end()), steps,
        step_ms[step_ms.size() / 2], step_ms[step_ms.size() * 9 / 10], step_ms.back(),
        total_ms / static_cast<double>(steps), static_cast<double>(g->cached_bytes()) / (1 << 20));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string tokenizer = argc > 1 ? argv[1] : "tests/data/tokenizers/qwen3";
  std::vector<std::string> schemas;
  for (int i = 2; i < argc; ++i) schemas.push_back(argv[i]);
  if (schemas.empty()) schemas = {"bench/schemas/30_properties.json", "bench/schemas/summary.json"};
  return Run(tokenizer, schemas);
}
