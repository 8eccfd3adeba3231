// Long-document summaries (server/service/document_summary.h) through the
// real engine with a fake model that records what it was asked: map-reduce
// runs every chunk in one batch and reduces in rounds, refine runs one
// request at a time, usage adds up every request, and bad plans are
// refused before anything runs.
#include "server/service/document_summary.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "server/service/document_splitter.h"
#include "tests/engine/one_hot_logits.h"

namespace ropeserve::service {
namespace {

constexpr TokenId kEos = 151645;  // Qwen3's <|im_end|>

struct Record {
  std::mutex mu;
  std::map<RequestId, std::vector<TokenId>> fed;  // every token computed, in order
  std::map<RequestId, int> emitted;
  std::size_t max_parallel = 0;  // requests in one step
};

// Emits `script` (cyclically, or then EOS) for every request and records
// what every request was fed.
class RecordingModel : public testing::LogitsExecutor {
 public:
  RecordingModel(std::shared_ptr<Record> rec, std::vector<TokenId> script, bool eos_after)
      : rec_(std::move(rec)), script_(std::move(script)), eos_after_(eos_after) {}
  StatusOr<StepLogits> Forward(const StepPlan& plan) override {
    std::lock_guard<std::mutex> lock(rec_->mu);
    std::set<RequestId> ids;
    for (const auto& s : plan.sequences) {
      ids.insert(s.request_id);
      auto& fed = rec_->fed[s.request_id];
      fed.insert(fed.end(), s.token_ids.begin(), s.token_ids.end());
    }
    rec_->max_parallel = std::max(rec_->max_parallel, ids.size());
    return testing::OneHotLogits(plan, vocab_size(), 30.0f, [&](const ScheduledSequence& s) -> std::int64_t {
      const auto k = static_cast<std::size_t>(rec_->emitted[s.request_id]++);
      if (k < script_.size()) return script_[k];
      return eos_after_ ? kEos : script_[k % script_.size()];
    });
  }
  std::int64_t vocab_size() const override { return 151936; }

 private:
  std::shared_ptr<Record> rec_;
  std::vector<TokenId> script_;
  bool eos_after_;
};

std::shared_ptr<const tok::Tokenizer> Qwen3() {
  auto t = tok::Tokenizer::FromPath(std::string(ROPESERVE_TEST_DATA) + "/tokenizers/qwen3");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : nullptr;
}

std::string Gpl() {
  std::ifstream in(std::string(ROPESERVE_TEST_DATA) + "/text/gpl-3.txt", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Fixture {
  std::shared_ptr<const tok::Tokenizer> tokenizer = Qwen3();
  std::shared_ptr<Record> rec = std::make_shared<Record>();
  std::unique_ptr<GenerationService> service;

  // Prefix caching off by default: then every prompt token reaches the
  // model and the recorded prompts are whole.
  explicit Fixture(const std::string& script_text, bool eos_after = false, std::size_t max_document_bytes = 1 << 20,
                   bool prefix_caching = false, std::int64_t max_num_batched_tokens = 2048) {
    auto e = tokenizer->Encode(script_text, false);
    std::vector<TokenId> script(e->ids.begin(), e->ids.end());
    GenerationServiceConfig c;
    c.name = "fake";
    c.model.vocab_size = 151936;
    c.model.max_position_embeddings = 256;
    c.dtype = "float32";
    c.engine.num_blocks = 2048;
    c.engine.eos_token_ids = {kEos};
    c.engine.block_size = 4;
    c.engine.scheduler.max_model_len = 256;
    c.engine.scheduler.enable_prefix_caching = prefix_caching;
    c.engine.scheduler.max_num_batched_tokens = max_num_batched_tokens;
    c.kv.num_blocks = 2048;
    c.kv.tokens = 8192;
    c.requests.max_document_bytes = max_document_bytes;
    auto s =
        GenerationService::Create(std::move(c), std::make_unique<RecordingModel>(rec, script, eos_after), tokenizer);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    service = std::move(*s);
  }

  std::string Text(const std::vector<TokenId>& ids) const {
    return *tokenizer->Decode(std::vector<TokenId>(ids.begin(), ids.end()), false);
  }
  // Each request's prompt (what it was fed minus its own tokens fed back).
  std::vector<std::string> Prompts() {
    std::lock_guard<std::mutex> lock(rec->mu);
    std::vector<std::string> out;
    for (auto& [id, fed] : rec->fed) {
      const std::size_t own = static_cast<std::size_t>(std::max(0, rec->emitted[id] - 1));
      out.push_back(Text(std::vector<TokenId>(fed.begin(), fed.end() - static_cast<std::ptrdiff_t>(own))));
    }
    return out;
  }
};

struct SummaryRun {
  std::vector<OutputDelta::Progress> progress;
  std::string text;
  OutputDelta last;
};

SummaryRun ReadAll(OutputSource& source) {
  SummaryRun run;
  while (true) {
    auto d = source.Next(std::chrono::milliseconds(10000));
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    if (!d.ok()) return run;
    if (d->progress) {
      EXPECT_TRUE(d->ids.empty() && d->text.empty());
      run.progress.push_back(*d->progress);
    }
    if (!d->text.empty()) {
      EXPECT_FALSE(d->progress);
    }
    run.text += d->text;
    if (d->finished) {
      run.last = *d;
      return run;
    }
  }
}

// Totals over every request the model saw: (prompt tokens, generated tokens).
std::pair<std::int64_t, std::int64_t> Totals(Record& rec) {
  std::lock_guard<std::mutex> lock(rec.mu);
  std::int64_t prompt = 0, generated = 0;
  for (auto& [id, fed] : rec.fed) {
    prompt += static_cast<std::int64_t>(fed.size()) - (rec.emitted[id] - 1);
    generated += rec.emitted[id];
  }
  return {prompt, generated};
}

TEST(DocumentSummary, InstructionsFollowStyleFocusLanguage) {
  EXPECT_EQ(StyleInstruction(SummaryStyle::kParagraph, "", "", ""), GenerationService::kDefaultSummaryInstruction);
  EXPECT_NE(StyleInstruction(SummaryStyle::kBullets, "", "", "").find("bullet points"), std::string::npos);
  EXPECT_NE(StyleInstruction(SummaryStyle::kHeadline, "", "", "").find("headline"), std::string::npos);
  EXPECT_EQ(StyleInstruction(SummaryStyle::kHeadline, "Be brief.", "costs", "French"),
            "Be brief. Focus on: costs. Write the summary in French.");
  EXPECT_EQ(StyleInstruction(SummaryStyle::kParagraph, "X.", "Who pays?", ""), "X. Focus on: Who pays?");
  EXPECT_NE(MapInstruction("costs").find("Focus on: costs."), std::string::npos);
}

TEST(DocumentSummary, MapReduceBatchesTheChunksAndReducesInRounds) {
  // Intermediate summaries run to their length (no EOS): 32 tokens each,
  // too many to combine at once, so a reduce round comes first.
  Fixture fx(" alpha beta gamma delta epsilon zeta eta theta iota kappa");
  DocumentSummarizer summarizer(*fx.service);
  SummaryFields f;
  f.text = Gpl().substr(0, 6000);
  auto plan = summarizer.Plan(f, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->strategy, SummaryStrategy::kMapReduce);
  EXPECT_STREQ(StrategyName(*plan), "map_reduce");
  EXPECT_EQ(plan->max_tokens, 64);        // min(256, context / 4)
  EXPECT_EQ(plan->chunk_max_tokens, 32);  // min(max_tokens, context / 8)
  const std::size_t n = plan->chunks.size();
  ASSERT_GE(n, 6u);
  auto source = summarizer.Start(*plan, {}, 0, GenerationService::Admission::kWait);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const SummaryRun run = ReadAll(**source);

  // Progress: every chunk, in order, then the reduce round's groups.
  ASSERT_GT(run.progress.size(), n);
  for (std::size_t k = 0; k < n; ++k) {
    EXPECT_EQ(run.progress[k].phase, "map");
    EXPECT_EQ(run.progress[k].done, static_cast<int>(k + 1));
    EXPECT_EQ(run.progress[k].total, static_cast<int>(n));
  }
  const int groups = run.progress[n].total;
  EXPECT_GE(groups, 2);
  EXPECT_LT(groups, static_cast<int>(n));
  for (std::size_t k = n; k < run.progress.size(); ++k) EXPECT_EQ(run.progress[k].phase, "reduce");
  EXPECT_EQ(run.progress.back().done, run.progress.back().total);

  // All chunks were decoded in the same steps; then each group, then the final.
  EXPECT_GE(fx.rec->max_parallel, n);
  const auto prompts = fx.Prompts();
  EXPECT_EQ(prompts.size(), n + static_cast<std::size_t>(groups) + 1);
  for (const auto& chunk : plan->chunks) {
    int holders = 0;
    for (const auto& p : prompts) holders += p.find(chunk) != std::string::npos;
    EXPECT_EQ(holders, 1) << chunk.substr(0, 60);
  }
  int finals = 0;
  for (const auto& p : prompts) finals += p.find(CombineInstruction(plan->final_instruction)) != std::string::npos;
  EXPECT_EQ(finals, 1);

  // The final summary, and usage over every request.
  EXPECT_EQ(run.last.finish_reason, "length");
  EXPECT_NE(run.text.find("alpha beta"), std::string::npos);
  const auto [prompt, generated] = Totals(*fx.rec);
  EXPECT_EQ(run.last.prompt_tokens, prompt);
  EXPECT_EQ(run.last.completion_tokens, generated);
  EXPECT_EQ(generated, static_cast<std::int64_t>(n + groups) * 32 + 64);
}

// The chunk prompts share their instruction: with the prefix cache, its
// blocks are computed once; usage still counts every prompt token.
// A 64-token step budget admits the chunks over several steps, so later
// ones find the first one's blocks cached whatever the timing (with the
// default budget all chunks could be admitted in the engine's first step,
// before anything is cached, when they arrive before it starts).
TEST(DocumentSummary, ChunksShareTheInstructionPrefix) {
  Fixture fx(" Fine summary.", /*eos_after=*/true, 1 << 20, /*prefix_caching=*/true, /*max_num_batched_tokens=*/64);
  DocumentSummarizer summarizer(*fx.service);
  SummaryFields f;
  f.text = Gpl().substr(0, 6000);
  auto plan = summarizer.Plan(f, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto source = summarizer.Start(*plan, {}, 0, GenerationService::Admission::kWait);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const SummaryRun run = ReadAll(**source);
  EXPECT_EQ(run.text, " Fine summary.");
  const auto [computed, generated] = Totals(*fx.rec);
  EXPECT_GT(run.last.cached_tokens, 0);
  EXPECT_EQ(run.last.prompt_tokens, computed + run.last.cached_tokens);
  EXPECT_EQ(run.last.completion_tokens, generated);
}

TEST(DocumentSummary, RefineRunsOneRequestAtATime) {
  Fixture fx(" Fine summary.", /*eos_after=*/true);
  DocumentSummarizer summarizer(*fx.service);
  SummaryFields f;
  f.text = Gpl().substr(0, 4000);
  f.strategy = "refine";
  f.style = "bullets";
  auto plan = summarizer.Plan(f, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::size_t n = plan->chunks.size();
  ASSERT_GE(n, 3u);
  EXPECT_STREQ(StrategyName(*plan), "refine");
  auto source = summarizer.Start(*plan, {}, 0, GenerationService::Admission::kWait);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const SummaryRun run = ReadAll(**source);
  ASSERT_EQ(run.progress.size(), n - 1);
  for (std::size_t k = 0; k + 1 < n; ++k) {
    EXPECT_EQ(run.progress[k].phase, "refine");
    EXPECT_EQ(run.progress[k].done, static_cast<int>(k + 1));
  }
  EXPECT_EQ(fx.rec->max_parallel, 1u);
  EXPECT_EQ(run.text, " Fine summary.");
  EXPECT_EQ(run.last.finish_reason, "stop");
  // Every step after the first carries the summary so far and its chunk;
  // the last one the requested style.
  const auto prompts = fx.Prompts();
  ASSERT_EQ(prompts.size(), n);
  for (std::size_t k = 1; k < n; ++k) {
    EXPECT_NE(prompts[k].find("Summary so far:\nFine summary."), std::string::npos) << k;
    EXPECT_NE(prompts[k].find(plan->chunks[k]), std::string::npos) << k;
  }
  EXPECT_NE(prompts.back().find("bullet points"), std::string::npos);
  const auto [prompt, generated] = Totals(*fx.rec);
  EXPECT_EQ(run.last.prompt_tokens, prompt);
  EXPECT_EQ(run.last.completion_tokens, generated);
}

TEST(DocumentSummary, ShortTextIsOnePassAsBefore) {
  Fixture fx(" Fine summary.", true);
  DocumentSummarizer summarizer(*fx.service);
  SummaryFields f;
  f.text = "The council met on Tuesday. It approved the budget.";
  for (const char* strategy : {"auto", "map_reduce", "refine", "truncate"}) {
    f.strategy = strategy;
    auto plan = summarizer.Plan(f, {});
    ASSERT_TRUE(plan.ok());
    EXPECT_STREQ(StrategyName(*plan), "single");
    ASSERT_EQ(plan->chunks.size(), 1u);
    EXPECT_EQ(plan->chunks[0], f.text);
  }
  auto plan = summarizer.Plan(f, {});
  auto source = summarizer.Start(*plan, {}, 0, GenerationService::Admission::kWait);
  ASSERT_TRUE(source.ok());
  const SummaryRun run = ReadAll(**source);
  EXPECT_TRUE(run.progress.empty());
  EXPECT_EQ(run.text, " Fine summary.");
  // The same prompt as the one-pass path always built.
  const auto expected = fx.service->SummaryPrompt(f.text, "");
  EXPECT_EQ(run.last.prompt_tokens, static_cast<std::int64_t>(expected->size()));
  EXPECT_EQ(fx.Prompts().at(0), fx.Text(std::vector<TokenId>(expected->begin(), expected->end())));
}

// auto leaves a text that fits alone; map_reduce asked for chunks it.
TEST(DocumentSummary, MapReduceAskedForChunksATextThatFits) {
  Fixture fx(" Fine summary.", true);
  DocumentSummarizer summarizer(*fx.service);
  SummaryFields f;
  f.text = Gpl().substr(0, 300);
  f.chunk_tokens = 24;
  auto one = summarizer.Plan(f, {});
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_STREQ(StrategyName(*one), "single");
  f.strategy = "map_reduce";
  auto chunked = summarizer.Plan(f, {});
  ASSERT_TRUE(chunked.ok()) << chunked.status().ToString();
  EXPECT_STREQ(StrategyName(*chunked), "map_reduce");
  EXPECT_GE(chunked->chunks.size(), 2u);
  auto source = summarizer.Start(*chunked, {}, 0, GenerationService::Admission::kWait);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const SummaryRun run = ReadAll(**source);
  EXPECT_EQ(run.progress.size(), chunked->chunks.size());
  EXPECT_EQ(run.text, " Fine summary.");
}

TEST(DocumentSummary, TruncateKeepsTheFirstSentencesThatFit) {
  Fixture fx(" Fine summary.", true);
  DocumentSummarizer summarizer(*fx.service);
  SummaryFields f;
  f.text = Gpl();
  f.strategy = "truncate";
  auto plan = summarizer.Plan(f, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_STREQ(StrategyName(*plan), "truncate");
  ASSERT_EQ(plan->chunks.size(), 1u);
  const std::string& kept = plan->chunks[0];
  const std::size_t at = f.text.find(kept);
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(f.text.find_first_not_of(" \n"), at);  // leading whitespace trimmed
  EXPECT_GE(BoundaryRank(f.text, at + kept.size()), 3);
  auto ids = fx.service->SummaryPrompt(kept, plan->final_instruction);
  EXPECT_LE(static_cast<std::int64_t>(ids->size()) + plan->max_tokens, 256);
  auto source = summarizer.Start(*plan, {}, 0, GenerationService::Admission::kWait);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ(ReadAll(**source).text, " Fine summary.");
}

TEST(DocumentSummary, BadPlansAreRefusedUpFront) {
  Fixture fx(" x", true, /*max_document_bytes=*/20000);
  DocumentSummarizer summarizer(*fx.service);
  auto refused = [&](SummaryFields f, GenerationFields g, ErrorCode code, const std::string& param) {
    auto p = summarizer.Plan(f, g);
    ASSERT_FALSE(p.ok()) << param;
    EXPECT_EQ(p.status().code(), code) << p.status().ToString();
    EXPECT_EQ(p.status().param(), param) << p.status().ToString();
  };
  const std::string doc = Gpl().substr(0, 15000);
  SummaryFields f;
  f.text = Gpl();
  refused(f, {}, ErrorCode::kPayloadTooLarge, "text");  // over --max-document-bytes
  f.text = doc;
  auto with = [&](auto set) {
    SummaryFields g = f;
    set(g);
    return g;
  };
  refused(with([](SummaryFields& g) { g.strategy = "summarize"; }), {}, ErrorCode::kInvalidArgument, "strategy");
  refused(with([](SummaryFields& g) { g.style = "poem"; }), {}, ErrorCode::kInvalidArgument, "style");
  refused(with([](SummaryFields& g) { g.focus = std::string(2000, 'a'); }), {}, ErrorCode::kInvalidArgument, "focus");
  refused(with([](SummaryFields& g) { g.chunk_tokens = 10000; }), {}, ErrorCode::kInvalidArgument, "chunk_tokens");
  refused(with([](SummaryFields& g) { g.chunk_tokens = 5; }), {}, ErrorCode::kInvalidArgument, "chunk_tokens");
  refused(with([](SummaryFields& g) { g.chunk_tokens = 100, g.chunk_overlap = 26; }), {}, ErrorCode::kInvalidArgument,
          "chunk_overlap");
  refused(with([](SummaryFields& g) { g.chunk_max_tokens = 100; }), {}, ErrorCode::kInvalidArgument,
          "chunk_max_tokens");
  GenerationFields big;
  big.max_tokens = 150;  // fits a prompt, but not beside the combined summaries
  refused(f, big, ErrorCode::kInvalidArgument, "max_tokens");
  // No prompt fits beside it: one pass, which the validator refuses as any
  // request (context_length_exceeded).
  big.max_tokens = 1000;
  SummaryFields note;
  note.text = "A short note.";
  auto hopeless = summarizer.Plan(note, big);
  ASSERT_TRUE(hopeless.ok());
  EXPECT_EQ(hopeless->chunks.size(), 1u);
  auto started = summarizer.Start(*hopeless, big, 0, GenerationService::Admission::kWait);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().param(), "max_tokens");
}

TEST(DocumentSummary, TooManyChunksIsTooLarge) {
  Fixture fx(" x", true);
  DocumentSummarizer summarizer(*fx.service);
  SummaryFields f;
  f.text = Gpl() + "\n\n" + Gpl();  // ~16k tokens: over 512 chunks of 16
  f.chunk_tokens = 16;
  f.chunk_overlap = 0;
  auto p = summarizer.Plan(f, {});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), ErrorCode::kPayloadTooLarge) << p.status().ToString();
  f.chunk_tokens = 128;
  EXPECT_TRUE(summarizer.Plan(f, {}).ok());
}

}  // namespace
}  // namespace ropeserve::service
