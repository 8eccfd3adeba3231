// The generation service and its output processor with a scripted fake
// model (no LibTorch): text, stop strings with hold-back, offline and
// threaded engines giving the same results, n choices' seeds, refusals.
#include "server/service/generation_service.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "server/service/input_processor.h"
#include "server/structured/grammar.h"
#include "tests/common/validated.h"
#include "tests/engine/one_hot_logits.h"

namespace ropeserve::service {
namespace {

constexpr std::size_t kPromptLen = 2;  // every test prompt

// Emits script[k] as the k-th generated token of every request (a wide
// margin over the rest of the row); after the script, token 0. With
// `flat`, every row is uniform instead (sampling then depends only on the
// request's generator).
class ScriptedModel : public testing::LogitsExecutor {
 public:
  ScriptedModel(std::vector<TokenId> script, std::int64_t vocab, bool flat = false)
      : script_(std::move(script)), vocab_(vocab), flat_(flat) {}
  StatusOr<StepLogits> Forward(const StepPlan& plan) override {
    return testing::OneHotLogits(plan, vocab_, 30.0f, [&](const auto& s) -> std::int64_t {
      if (flat_) return -1;
      const std::size_t k = static_cast<std::size_t>(s.context_length()) - kPromptLen;
      return k < script_.size() ? script_[k] : 0;
    });
  }
  std::int64_t vocab_size() const override { return vocab_; }

 private:
  std::vector<TokenId> script_;
  std::int64_t vocab_;
  bool flat_;
};

std::shared_ptr<const tok::Tokenizer> Qwen3() {
  auto t = tok::Tokenizer::FromPath(std::string(ROPESERVE_TEST_DATA) + "/tokenizers/qwen3");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : nullptr;
}

GenerationServiceConfig Config(std::int64_t vocab_size, bool thread, int num_blocks) {
  GenerationServiceConfig c;
  c.name = "fake";
  c.model.vocab_size = vocab_size;
  c.model.max_position_embeddings = 256;
  c.dtype = "float32";
  c.engine.num_blocks = num_blocks;
  c.engine.eos_token_ids = {151645};  // Qwen3's <|im_end|> (only read by structured output here)
  c.engine.block_size = 4;
  c.engine.scheduler.max_model_len = 64;
  c.kv.num_blocks = 64;
  c.kv.tokens = 256;
  c.engine_thread = thread;
  return c;
}

std::unique_ptr<GenerationService> Make(std::unique_ptr<ModelExecutor> model, bool thread,
                                        std::shared_ptr<const tok::Tokenizer> tokenizer, int num_blocks = 64) {
  GenerationServiceConfig c = Config(model->vocab_size(), thread, num_blocks);
  auto s = GenerationService::Create(std::move(c), std::move(model), std::move(tokenizer));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

// The script: the tokens of `text`.
std::vector<TokenId> Script(const tok::Tokenizer& t, const std::string& text) {
  auto e = t.Encode(text, false);
  EXPECT_TRUE(e.ok());
  return std::vector<TokenId>(e->ids.begin(), e->ids.end());
}

// Options that generate the whole script (past any EOS in it).
GenerationFields WholeScript(const std::vector<TokenId>& script) {
  GenerationFields f;
  f.max_tokens = static_cast<std::int64_t>(script.size());
  f.ignore_eos = true;
  return f;
}

TEST(GenerationService, TextAndStopStringsWithHoldBack) {
  auto tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  const std::string text = "The answer is forty-two. END of the story.";
  const auto script = Script(*tok, text);
  ASSERT_GT(script.size(), 8u);
  for (bool thread : {false, true}) {
    SCOPED_TRACE(thread ? "engine thread" : "offline");
    auto s = Make(std::make_unique<ScriptedModel>(script, tok->VocabSize()), thread, tok);
    ASSERT_NE(s, nullptr);
    GenerationFields f = WholeScript(script);
    auto whole = s->Generate({1, 2}, testing::Validated(*s, f, kPromptLen));
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    EXPECT_EQ(whole->text, text);
    EXPECT_EQ(whole->finish_reason, "length");

    f.stop = {"END of"};  // spans tokens: " END" must be held back until " of" decides
    std::vector<std::string> pieces;
    auto stopped = s->GenerateBatch({{1, 2}}, testing::Validated(*s, f, kPromptLen), false,
                                    [&](std::size_t, const Generation::Delta& d) { pieces.push_back(d.text); });
    ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
    const auto& r = (*stopped)[0];
    EXPECT_EQ(r.text, "The answer is forty-two. ");
    EXPECT_EQ(r.finish_reason, "stop");
    EXPECT_LT(r.generated_ids.size(), script.size());
    std::string joined;
    for (const auto& p : pieces) {
      joined += p;
      EXPECT_EQ(p.find('E'), std::string::npos) << "a piece of the stop string was released: " << p;
    }
    EXPECT_EQ(joined, r.text);
    if (!thread) {
      EXPECT_EQ(s->engine().pool().num_free(), 64);
    }
  }
}

// vLLM's output and token options: the stop string kept in the text (and
// nothing held back), special tokens in the text, allowed ids, bad words.
TEST(GenerationService, VllmStopStringSpecialTokensAllowedIdsAndBadWords) {
  auto tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  const TokenId im_end = 151645;  // <|im_end|>, a special token
  std::vector<TokenId> script = Script(*tok, "The answer is forty-two. END of the story.");
  const std::size_t end_at = script.size();
  script.push_back(im_end);
  for (TokenId id : Script(*tok, " More")) script.push_back(id);
  const std::vector<std::int64_t> whole(script.begin(), script.end());
  for (bool thread : {false, true}) {
    SCOPED_TRACE(thread ? "engine thread" : "offline");
    auto s = Make(std::make_unique<ScriptedModel>(script, tok->VocabSize()), thread, tok);
    ASSERT_NE(s, nullptr);
    GenerationFields f = WholeScript(script);
    auto run = [&](const GenerationFields& g, std::vector<std::string>* pieces = nullptr) {
      auto r = s->GenerateBatch({{1, 2}}, testing::Validated(*s, g, kPromptLen), false,
                                [&](std::size_t, const Generation::Delta& d) {
                                  if (pieces != nullptr) pieces->push_back(d.text);
                                });
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      return r.ok() ? (*r)[0] : GenerateResult{};
    };
    EXPECT_EQ(run(f).text, "The answer is forty-two. END of the story. More");
    GenerationFields keep = f;
    keep.skip_special_tokens = false;
    EXPECT_EQ(run(keep).text, "The answer is forty-two. END of the story.<|im_end|> More");

    GenerationFields stop = f;
    stop.stop = {"END of"};
    stop.include_stop_str_in_output = true;
    std::vector<std::string> pieces;
    const GenerateResult kept = run(stop, &pieces);
    EXPECT_EQ(kept.text, "The answer is forty-two. END of");
    std::string streamed;
    for (const auto& p : pieces) streamed += p;
    EXPECT_EQ(streamed, kept.text);
    // Nothing is held back: " END" goes out before " of" completes the stop
    // string (offline, each delta is one step's token).
    if (!thread) {
      EXPECT_NE(std::find(pieces.begin(), pieces.end(), " END"), pieces.end());
    }
    EXPECT_EQ(kept.finish_reason, "stop");
    EXPECT_EQ(kept.stop_string, "END of");

    GenerationFields allowed = f;
    allowed.allowed_token_ids = std::vector<std::int64_t>{script[3], script[1], 9};
    const GenerateResult a = run(allowed);
    ASSERT_EQ(a.generated_ids.size(), script.size());
    for (std::size_t k = 0; k < script.size(); ++k) {
      // The script's token where allowed, else the lowest allowed id (the
      // rest of the row ties).
      const TokenId want = script[k] == script[1] || script[k] == script[3]
                               ? script[k]
                               : std::min<TokenId>(9, std::min(script[1], script[3]));
      EXPECT_EQ(a.generated_ids[k], want) << k;
    }

    // " answer" is one token: banned wherever it comes, so the lowest id
    // (0) takes its place. A longer word bans its last token after the rest
    // of it: "the story" is tokenized alone and, as it has as many tokens
    // after a space, as " the story" (the script's).
    GenerationFields bad = f;
    bad.bad_words = {"answer"};
    std::vector<std::int64_t> want = whole;
    ASSERT_EQ(Script(*tok, " answer"), std::vector<TokenId>{script[1]});
    want[1] = 0;
    EXPECT_EQ(run(bad).generated_ids, want);
    const std::vector<TokenId> the_story = Script(*tok, " the story");
    ASSERT_EQ(the_story.size(), Script(*tok, "the story").size());
    const auto at = static_cast<std::size_t>(
        std::search(script.begin(), script.end(), the_story.begin(), the_story.end()) - script.begin());
    ASSERT_LT(at, end_at);
    bad.bad_words = {" the story"};  // leading whitespace is dropped first
    want = whole;
    want[at + the_story.size() - 1] = 0;
    EXPECT_EQ(run(bad).generated_ids, want);
    // vLLM's rule keeps the spaced form only when it has as many tokens as
    // the bare word: "forty-two" is 3 tokens, " forty-two" 2, so the word
    // inside a text is not banned (as vLLM does).
    ASSERT_NE(Script(*tok, "forty-two").size(), Script(*tok, " forty-two").size());
    bad.bad_words = {"forty-two"};
    EXPECT_EQ(run(bad).generated_ids, whole);
  }
}

TEST(GenerationService, OfflineAndThreadedEnginesAgree) {
  for (bool flat : {false, true}) {
    std::vector<TokenId> script{5, 7, 11, 13, 17, 19};
    auto offline = Make(std::make_unique<ScriptedModel>(script, 50, flat), false, nullptr);
    auto threaded = Make(std::make_unique<ScriptedModel>(script, 50, flat), true, nullptr);
    ASSERT_TRUE(offline && threaded);
    GenerationFields f;
    f.max_tokens = 6;
    f.top_logprobs = 2;
    f.temperature = 1.0;
    f.seed = 99;
    auto a = offline->GenerateBatch({{1, 2}, {3, 4}, {5, 6}}, testing::Validated(*offline, f, {2, 2, 2}),
                                    /*seed_offsets=*/true);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    for (std::size_t i = 0; i < 3; ++i) {
      GenerationFields fi = f;
      fi.seed = 99 + i;
      auto b = threaded->Generate((*a)[i].prompt_ids, testing::Validated(*threaded, fi, kPromptLen));
      ASSERT_TRUE(b.ok());
      EXPECT_EQ((*a)[i].generated_ids, b->generated_ids);
      EXPECT_EQ((*a)[i].logprobs, b->logprobs);  // same rows, same arithmetic
      if (!flat) {
        EXPECT_EQ(b->generated_ids, std::vector<std::int64_t>(script.begin(), script.end()));
      }
    }
  }
}

TEST(GenerationService, ChoicesUseSeedPlusIndex) {
  auto s = Make(std::make_unique<ScriptedModel>(std::vector<TokenId>{}, 1000, /*flat=*/true), false, nullptr);
  ASSERT_NE(s, nullptr);
  GenerationFields f;
  f.max_tokens = 8;
  f.temperature = 1.0;
  f.seed = 7;
  f.n = 3;
  auto n = s->GenerateN({1, 2}, testing::Validated(*s, f, kPromptLen));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(n->size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    GenerationFields fi = f;
    fi.seed = 7 + i;
    fi.n.reset();
    auto one = s->Generate({1, 2}, testing::Validated(*s, fi, kPromptLen));
    ASSERT_TRUE(one.ok());
    EXPECT_EQ((*n)[i].generated_ids, one->generated_ids) << "choice " << i;
  }
  // 8 uniform draws from 1000 ids: different seeds give different tokens.
  EXPECT_NE((*n)[0].generated_ids, (*n)[1].generated_ids);
}

TEST(GenerationService, RefusalsAreErrorsAndLeaveTheEngineUsable) {
  for (bool thread : {false, true}) {
    auto s = Make(std::make_unique<ScriptedModel>(std::vector<TokenId>{3}, 50), thread, nullptr);
    ASSERT_NE(s, nullptr);
    GenerationFields f;
    f.max_tokens = 100;  // 2 + 100 > max_model_len 64: the validator's refusal
    auto r = ValidateGeneration(f, Endpoint::kGenerate, {kPromptLen}, s->limits());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().param(), "max_tokens") << r.status().ToString();
    // Ids skipped the input processor: the engine's assertion, even for an
    // id that a narrowing cast would have wrapped into the vocabulary.
    f.max_tokens = 2;
    const ValidatedGeneration v = testing::Validated(*s, f, kPromptLen);
    EXPECT_EQ(s->Generate({1, 99}, v).status().code(), ErrorCode::kInternal);
    EXPECT_EQ(s->Generate({1, (std::int64_t{1} << 32) + 3}, v).status().code(), ErrorCode::kInternal);
    // A prompt the options were not validated for (empty, or longer than
    // the room max_tokens was bounded by): the service's assertion.
    EXPECT_EQ(s->Generate({}, v).status().code(), ErrorCode::kInternal);
    EXPECT_EQ(s->Generate({1, 2, 3}, v).status().code(), ErrorCode::kInternal);
    f.stop = {"x"};
    EXPECT_EQ(s->Generate({1, 2}, testing::Validated(*s, f, kPromptLen)).status().code(),
              ErrorCode::kFailedPrecondition);  // no tokenizer
    auto ok = s->Generate({1, 2}, v);
    ASSERT_TRUE(ok.ok()) << ok.status().ToString();
    EXPECT_EQ(ok->generated_ids, (std::vector<std::int64_t>{3, 0}));
  }
}

// The service's own settings are checked where they are used, once: a
// negative token limit per request is refused (0 = the KV cache's size).
TEST(GenerationService, RefusesANegativeRequestTokenLimit) {
  GenerationServiceConfig c = Config(50, false, 64);
  c.requests.max_request_tokens = -1;
  auto bad = GenerationService::Create(c, std::make_unique<ScriptedModel>(std::vector<TokenId>{}, 50), nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--max-request-tokens"), std::string::npos) << bad.status().ToString();
  c.requests.max_request_tokens = 0;
  auto unlimited = GenerationService::Create(c, std::make_unique<ScriptedModel>(std::vector<TokenId>{}, 50), nullptr);
  ASSERT_TRUE(unlimited.ok()) << unlimited.status().ToString();
  EXPECT_EQ((*unlimited)->limits().max_request_tokens, 256);  // the KV cache's tokens
}

// Structured output through the engine: seeded sampling over a flat model
// (every allowed token equally likely, so only the constraint shapes the
// text), the same tokens alone and when a small KV cache preempts the
// requests (the processor follows the tokens it is given, which survive
// the recompute), every output valid.
TEST(GenerationService, StructuredOutputIsValidAndSurvivesPreemption) {
  auto tokenizer = Qwen3();
  ASSERT_NE(tokenizer, nullptr);
  GenerationFields f;
  f.max_tokens = 40;
  f.temperature = 1.0;
  f.constraint = {
      structured::Constraint::Kind::kJsonSchema,
      R"({"type":"object","properties":{"a":{"type":"string","maxLength":6},"b":{"type":"integer","minimum":0,"maximum":99}},"required":["a","b"]})",
      {},
      "response_format"};
  const std::vector<std::vector<std::int64_t>> prompts = {{1, 2}, {3, 4}, {5, 6}, {7, 8}};
  auto roomy = Make(std::make_unique<ScriptedModel>(std::vector<TokenId>{}, 151669, /*flat=*/true), false, tokenizer);
  auto tight = Make(std::make_unique<ScriptedModel>(std::vector<TokenId>{}, 151669, /*flat=*/true), false, tokenizer,
                    /*num_blocks=*/14);
  ASSERT_TRUE(roomy && tight);
  f.seed = 5;
  auto batched = tight->GenerateBatch(prompts, testing::Validated(*tight, f, {2, 2, 2, 2}), /*seed_offsets=*/true);
  ASSERT_TRUE(batched.ok()) << batched.status().ToString();
  EXPECT_GT(tight->engine().stats().preemptions, 0u) << "the test needs preemption to happen";
  auto grammar = roomy->CompileConstraint(f.constraint);
  ASSERT_TRUE(grammar.ok());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    GenerationFields fi = f;
    fi.seed = 5 + i;
    auto alone = roomy->Generate(prompts[i], testing::Validated(*roomy, fi, kPromptLen));
    ASSERT_TRUE(alone.ok()) << alone.status().ToString();
    EXPECT_EQ((*batched)[i].generated_ids, alone->generated_ids) << i;
    EXPECT_EQ((*batched)[i].finish_reason, "stop") << (*batched)[i].text;
    EXPECT_TRUE((*grammar)->dfa().Matches((*batched)[i].text)) << (*batched)[i].text;
  }
  // Refused up front: a constraint that cannot be compiled, names its field.
  f.constraint.text = R"({"type":"string","format":"hostname"})";
  auto bad = roomy->Generate({1, 2}, testing::Validated(*roomy, f, kPromptLen));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().param(), "response_format");
}

}  // namespace
}  // namespace ropeserve::service

namespace ropeserve::service {
namespace {

// The one input processor: model name, texts / chat / ids to checked ids,
// the endpoint's defaults, errors naming the request's field.
TEST(InputProcessor, PreparesTextChatAndIdPromptsForEveryEndpoint) {
  auto tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  auto service = Make(std::make_unique<ScriptedModel>(std::vector<TokenId>{}, 151936), false, tok);
  ASSERT_NE(service, nullptr);

  GenerationRequest text;
  text.prompts = {Prompt{std::string("Hello world"), {}}, Prompt{std::nullopt, {5, 6, 7}}};
  text.endpoint = Endpoint::kCompletions;
  text.trace = TraceContext::NewRoot();
  auto p = PrepareGeneration(*service, text);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const auto hello = tok->Encode("Hello world", true)->ids;
  ASSERT_EQ(p->prompts.size(), 2u);
  EXPECT_EQ(p->prompts[0], std::vector<std::int64_t>(hello.begin(), hello.end()));
  EXPECT_EQ(p->prompts[1], (std::vector<std::int64_t>{5, 6, 7}));
  EXPECT_EQ(p->generation.options().max_tokens, 16);  // OpenAI's completions default
  EXPECT_EQ(p->generation.options().trace.TraceIdHex(), text.trace.TraceIdHex());
  EXPECT_TRUE(p->rendered_chat.empty());

  GenerationRequest chat;
  chat.chat = ChatPrompt{nlohmann::ordered_json::parse(R"([{"role":"user","content":"Hi"}])")};
  chat.endpoint = Endpoint::kChat;
  p = PrepareGeneration(*service, chat);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_NE(p->rendered_chat.find("<|im_start|>assistant\n"), std::string::npos) << p->rendered_chat;
  const auto rendered = tok->Encode(p->rendered_chat, false)->ids;
  EXPECT_EQ(p->prompts[0], std::vector<std::int64_t>(rendered.begin(), rendered.end()));
  // Chat's default: the rest of the context (max_model_len 64 here).
  EXPECT_EQ(p->generation.options().max_tokens, 64 - static_cast<std::int64_t>(rendered.size()));

  GenerationRequest ids;
  ids.prompts = {Prompt{std::nullopt, {1, 151936}}};
  ids.prompt_param = "prompt_ids";
  auto bad = PrepareGeneration(*service, ids);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().param(), "prompt_ids");
  EXPECT_NE(bad.status().message().find("outside the vocabulary"), std::string::npos);
  ids.prompts = {};
  EXPECT_EQ(PrepareGeneration(*service, ids).status().param(), "prompt_ids");
  text.model = "another-model";
  EXPECT_FALSE(PrepareGeneration(*service, text).ok());
  text.model = "fake";
  text.fields.temperature = -1;
  EXPECT_EQ(PrepareGeneration(*service, text).status().param(), "temperature");
}

// vLLM's truncate_prompt_tokens: at most k tokens, cut from the left after
// the chat template (a text prompt keeps its added special tokens); the
// validator sees the cut lengths.
TEST(InputProcessor, TruncatePromptTokensKeepsTheLastTokens) {
  auto tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  auto service = Make(std::make_unique<ScriptedModel>(std::vector<TokenId>{}, 151936), false, tok);
  ASSERT_NE(service, nullptr);
  const auto long_text = tok->Encode("one two three four five six seven", true)->ids;
  ASSERT_GT(long_text.size(), 4u);
  GenerationRequest r;
  r.endpoint = Endpoint::kCompletions;
  r.prompts = {Prompt{std::string("one two three four five six seven"), {}}, Prompt{std::nullopt, {5, 6}}};
  r.fields.truncate_prompt_tokens = 3;
  auto p = PrepareGeneration(*service, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->prompts[0], std::vector<std::int64_t>(long_text.end() - 3, long_text.end()));
  EXPECT_EQ(p->prompts[1], (std::vector<std::int64_t>{5, 6}));  // shorter: as it is
  EXPECT_EQ(p->generation.longest_prompt(), 3u);

  // A prompt longer than the context fits once cut (max_model_len 64).
  r.prompts = {Prompt{std::nullopt, std::vector<std::int64_t>(100, 7)}};
  r.fields.truncate_prompt_tokens.reset();
  EXPECT_EQ(PrepareGeneration(*service, r).status().reason(), "context_length_exceeded");
  r.fields.truncate_prompt_tokens = 60;
  r.fields.max_tokens = 4;
  p = PrepareGeneration(*service, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->prompts[0].size(), 60u);
  // -1 is the context length, which leaves no room to generate.
  r.fields.truncate_prompt_tokens = -1;
  EXPECT_EQ(PrepareGeneration(*service, r).status().reason(), "context_length_exceeded");
  for (std::int64_t bad : {0, -2, 65}) {
    r.fields.truncate_prompt_tokens = bad;
    EXPECT_EQ(PrepareGeneration(*service, r).status().param(), "truncate_prompt_tokens") << bad;
  }

  // A tokenizer that adds BOS keeps it, as transformers' left truncation
  // (vLLM's) does: BOS and the text's last k - 1 tokens.
  auto llama = tok::Tokenizer::FromPath(std::string(ROPESERVE_TEST_DATA) + "/tokenizers/llama2");
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  auto with_bos = Make(std::make_unique<ScriptedModel>(std::vector<TokenId>{}, 32000), false, *llama);
  ASSERT_NE(with_bos, nullptr);
  const auto full = (*llama)->Encode("one two three four five six seven", true)->ids;
  ASSERT_EQ(full[0], 1);  // <s>
  r.prompts = {Prompt{std::string("one two three four five six seven"), {}}};
  r.fields.truncate_prompt_tokens = 3;
  p = PrepareGeneration(*with_bos, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->prompts[0], (std::vector<std::int64_t>{1, full[full.size() - 2], full.back()}));
  r.fields.truncate_prompt_tokens = 1;  // BOS alone would fill it
  EXPECT_EQ(PrepareGeneration(*with_bos, r).status().param(), "truncate_prompt_tokens");
  r.prompts = {Prompt{std::nullopt, std::vector<std::int64_t>(full.begin(), full.end())}};
  r.fields.truncate_prompt_tokens = 3;  // ids are cut as they are
  p = PrepareGeneration(*with_bos, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->prompts[0], std::vector<std::int64_t>(full.end() - 3, full.end()));

  GenerationRequest chat;
  chat.chat = ChatPrompt{nlohmann::ordered_json::parse(R"([{"role":"user","content":"Hi there"}])")};
  chat.endpoint = Endpoint::kChat;
  chat.fields.truncate_prompt_tokens = 2;
  p = PrepareGeneration(*service, chat);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const auto rendered = tok->Encode(p->rendered_chat, false)->ids;
  EXPECT_EQ(p->prompts[0], std::vector<std::int64_t>(rendered.end() - 2, rendered.end()));
}

}  // namespace
}  // namespace ropeserve::service
