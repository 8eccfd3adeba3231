// The one request validator (server/service/request_params.h): defaults per
// endpoint, ranges, caps, and errors that name their field.
#include "server/service/request_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ropeserve::service {
namespace {

Limits TestLimits() {
  Limits l;
  l.max_model_len = 1000;
  l.vocab_size = 500;
  l.max_request_tokens = 0;
  return l;
}

StatusOr<ValidatedGeneration> V(const GenerationFields& f, Endpoint e = Endpoint::kCompletions,
                                std::vector<std::size_t> prompts = {10}, Limits l = TestLimits()) {
  return ValidateGeneration(f, e, prompts, l);
}

// The field the error names, or "" when it passed.
std::string Param(const StatusOr<ValidatedGeneration>& v) { return v.ok() ? "" : v.status().param(); }

TEST(ValidateGeneration, DefaultsFollowTheEndpoint) {
  auto c = V({}, Endpoint::kCompletions);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->options().max_tokens, 16);
  EXPECT_EQ(c->options().sampling.temperature, 1.0);
  EXPECT_EQ(c->n(), 1);
  auto chat = V({}, Endpoint::kChat, {10});
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->options().max_tokens, 990);  // the rest of the context
  auto sum = V({}, Endpoint::kSummarize, {900});
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->options().max_tokens, 100);  // min(256, room)
  EXPECT_EQ(sum->options().sampling.temperature, 0.0);
  auto gen = V({}, Endpoint::kGenerate);
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(gen->options().max_tokens, 16);
  EXPECT_TRUE(gen->options().sampling.greedy());
}

TEST(ValidateGeneration, VanishingTemperaturesAreGreedyAndBadOnesRefused) {
  for (double t : {1e-320, 1e-6, 0.0}) {
    GenerationFields f;
    f.temperature = t;
    auto v = V(f);
    ASSERT_TRUE(v.ok()) << t;
    EXPECT_TRUE(v->options().sampling.greedy()) << t;
  }
  GenerationFields warm;
  warm.temperature = 1e-5;
  EXPECT_FALSE(V(warm)->options().sampling.greedy());
  for (double t : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    GenerationFields f;
    f.temperature = t;
    EXPECT_EQ(Param(V(f)), "temperature") << t;
  }
  GenerationFields top_p;
  top_p.top_p = 0;
  EXPECT_EQ(Param(V(top_p)), "top_p");
  GenerationFields penalty;
  penalty.presence_penalty = 3;
  EXPECT_EQ(Param(V(penalty)), "presence_penalty");
  GenerationFields top_k;
  top_k.top_k = -1;  // vLLM's "all tokens"
  EXPECT_EQ(V(top_k)->options().sampling.top_k, 0);
}

TEST(ValidateGeneration, TokensMustFitTheContextAndTheRequestBudget) {
  GenerationFields f;
  f.max_tokens = 991;
  EXPECT_EQ(Param(V(f, Endpoint::kCompletions, {10})), "max_tokens");
  f.max_tokens = 990;
  EXPECT_TRUE(V(f, Endpoint::kCompletions, {10}).ok());
  f.max_tokens = 0;
  EXPECT_EQ(Param(V(f)), "max_tokens");
  EXPECT_EQ(Param(V({}, Endpoint::kCompletions, {1000})), "prompt");   // no room for one token
  EXPECT_EQ(Param(V({}, Endpoint::kCompletions, {10, 0})), "prompt");  // an empty prompt

  // 4 prompts x n=4 of 10 tokens, 200 tokens each: 16 x 210 = 3360.
  Limits budget = TestLimits();
  budget.max_request_tokens = 3000;
  GenerationFields many;
  many.n = 4;
  many.max_tokens = 200;
  EXPECT_EQ(Param(V(many, Endpoint::kCompletions, {10, 10, 10, 10}, budget)), "max_tokens");
  many.max_tokens = 170;  // 16 x 180 = 2880
  EXPECT_TRUE(V(many, Endpoint::kCompletions, {10, 10, 10, 10}, budget).ok());
  // A default max_tokens shrinks to fit the budget instead of failing.
  GenerationFields chat;
  chat.n = 4;
  auto v = V(chat, Endpoint::kChat, {100}, budget);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->options().max_tokens, (3000 - 400) / 4);
  budget.max_request_tokens = 300;  // the prompts alone exceed it
  EXPECT_EQ(Param(V(chat, Endpoint::kChat, {100}, budget)), "prompt");
}

TEST(ValidateGeneration, CapsOnWhatOneRequestMayAskFor) {
  GenerationFields n;
  n.n = kMaxChoices + 1;
  EXPECT_EQ(Param(V(n)), "n");
  n.n = 8;  // 9 prompts x 8 > 64
  EXPECT_EQ(Param(V(n, Endpoint::kCompletions, std::vector<std::size_t>(9, 5))), "n");
  EXPECT_EQ(Param(V({}, Endpoint::kCompletions, std::vector<std::size_t>(kMaxPrompts + 1, 5))), "prompt");

  GenerationFields stops;
  stops.stop.assign(kMaxStopStrings + 1, "x");
  EXPECT_EQ(Param(V(stops)), "stop");
  stops.stop = {std::string(kMaxStopStringBytes + 1, 'x')};
  EXPECT_EQ(Param(V(stops)), "stop");
  stops.stop = {""};
  EXPECT_EQ(Param(V(stops)), "stop");
  stops.stop = {std::string(kMaxStopStringBytes, 'x')};
  EXPECT_TRUE(V(stops).ok());

  GenerationFields ids;
  ids.stop_token_ids.assign(kMaxStopTokenIds + 1, 3);
  EXPECT_EQ(Param(V(ids)), "stop_token_ids");
  ids.stop_token_ids = {500};  // outside the vocabulary
  EXPECT_EQ(Param(V(ids)), "stop_token_ids");

  GenerationFields lp;
  lp.top_logprobs = kMaxTopLogprobs + 1;
  EXPECT_EQ(Param(V(lp)), "top_logprobs");
  GenerationFields min;
  min.max_tokens = 5;
  min.min_tokens = 6;
  EXPECT_EQ(Param(V(min)), "min_tokens");
}

// The guided-decoding limits live here, not in the transports' readers:
// the same refusal (naming the request's field) from REST, gRPC and the CLI.
TEST(ValidateGeneration, GuidedRegexAndChoiceLimits) {
  using K = structured::Constraint::Kind;
  auto with = [](structured::Constraint c) {
    GenerationFields f;
    f.constraint = std::move(c);
    return f;
  };
  EXPECT_EQ(Param(V(with({K::kRegex, "", {}, "guided_regex"}))), "guided_regex");
  EXPECT_EQ(Param(V(with({K::kRegex, std::string(kMaxGuidedRegexBytes + 1, 'a'), {}, "constraint.regex"}))),
            "constraint.regex");
  EXPECT_TRUE(V(with({K::kRegex, std::string(kMaxGuidedRegexBytes, 'a'), {}, "guided_regex"})).ok());
  EXPECT_EQ(Param(V(with({K::kChoice, "", {}, "guided_choice"}))), "guided_choice");
  EXPECT_EQ(Param(V(with({K::kChoice, "", {"yes", ""}, "guided_choice"}))), "guided_choice");
  EXPECT_EQ(Param(V(with({K::kChoice, "", std::vector<std::string>(kMaxGuidedChoices + 1, "x"), "constraint.choice"}))),
            "constraint.choice");
  auto ok = V(with({K::kChoice, "", std::vector<std::string>(kMaxGuidedChoices, "x"), "guided_choice"}));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->options().constraint.choices.size(), kMaxGuidedChoices);
}

// Structured output must be able to end, so neither ignore_eos nor
// min_tokens may overrule its EOS; the one check (the service and the
// engine do not repeat it), naming the field that conflicts.
TEST(ValidateGeneration, StructuredOutputRefusesIgnoreEosAndMinTokens) {
  GenerationFields f;
  f.constraint = {structured::Constraint::Kind::kChoice, "", {"yes", "no"}, "guided_choice"};
  ASSERT_TRUE(V(f).ok());
  f.ignore_eos = true;
  auto eos = V(f);
  EXPECT_EQ(Param(eos), "ignore_eos");
  EXPECT_NE(eos.status().message().find("guided_choice"), std::string::npos) << eos.status().ToString();
  f.ignore_eos = false;
  f.min_tokens = 1;
  EXPECT_EQ(Param(V(f)), "min_tokens");
  f.min_tokens = 0;
  EXPECT_TRUE(V(f).ok());
}

TEST(ValidateGeneration, LogitBiasAndPriority) {
  GenerationFields f;
  f.logit_bias = {{3, -100.0}, {499, 100.0}};
  f.priority = -7;
  // A priority needs --scheduling-policy priority.
  EXPECT_EQ(Param(V(f)), "priority");
  Limits with_priority = TestLimits();
  with_priority.priority_scheduling = true;
  auto v = V(f, Endpoint::kCompletions, {10}, with_priority);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->options().logit_bias, (std::vector<std::pair<std::int64_t, float>>{{3, -100.f}, {499, 100.f}}));
  EXPECT_EQ(v->options().priority, -7);
  f.priority.reset();
  f.logit_bias = {{500, 1.0}};  // outside the vocabulary
  EXPECT_EQ(Param(V(f)), "logit_bias");
  f.logit_bias = {{1, 100.5}};
  EXPECT_EQ(Param(V(f)), "logit_bias");
  f.logit_bias = {{1, std::nan("")}};
  EXPECT_EQ(Param(V(f)), "logit_bias");
  f.logit_bias.assign(kMaxLogitBias + 1, {1, 1.0});
  EXPECT_EQ(Param(V(f)), "logit_bias");
  f.logit_bias.clear();
  f.priority = kMaxPriority + 1;
  EXPECT_EQ(Param(V(f, Endpoint::kCompletions, {10}, with_priority)), "priority");
  f.priority = 0;  // asks for nothing: accepted either way
  EXPECT_TRUE(V(f).ok());
}

TEST(ValidateGeneration, VllmAllowedIdsBadWordsAndOutputOptions) {
  auto plain = V({});
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->options().skip_special_tokens);
  EXPECT_FALSE(plain->options().include_stop_str_in_output);
  EXPECT_TRUE(plain->options().allowed_token_ids.empty());

  GenerationFields f;
  f.allowed_token_ids = std::vector<std::int64_t>{9, 3, 9, 499};
  f.bad_words = {" hello", "two words"};
  f.include_stop_str_in_output = true;
  f.skip_special_tokens = false;
  auto v = V(f);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->options().allowed_token_ids, (std::vector<std::int64_t>{3, 9, 499}));  // sorted, distinct
  EXPECT_EQ(v->options().bad_words, f.bad_words);
  EXPECT_TRUE(v->options().include_stop_str_in_output);
  EXPECT_FALSE(v->options().skip_special_tokens);

  auto with = [](auto change) {
    GenerationFields g;
    change(g);
    return Param(V(g));
  };
  EXPECT_EQ(with([](auto& g) { g.allowed_token_ids = std::vector<std::int64_t>{}; }), "allowed_token_ids");
  EXPECT_EQ(with([](auto& g) { g.allowed_token_ids = std::vector<std::int64_t>{1, 500}; }), "allowed_token_ids");
  EXPECT_EQ(with([](auto& g) { g.allowed_token_ids = std::vector<std::int64_t>{-1}; }), "allowed_token_ids");
  EXPECT_EQ(with([](auto& g) { g.allowed_token_ids = std::vector<std::int64_t>(kMaxAllowedTokenIds + 1, 1); }),
            "allowed_token_ids");
  EXPECT_EQ(with([](auto& g) { g.bad_words = {""}; }), "bad_words");
  EXPECT_EQ(with([](auto& g) { g.bad_words = {" \t "}; }), "bad_words");
  EXPECT_EQ(with([](auto& g) { g.bad_words = {std::string(kMaxStopStringBytes + 1, 'a')}; }), "bad_words");
  EXPECT_EQ(with([](auto& g) { g.bad_words = std::vector<std::string>(kMaxBadWords + 1, "a"); }), "bad_words");
  EXPECT_EQ(with([](auto& g) { g.bad_words = std::vector<std::string>(kMaxBadWords, "a"); }), "");
  // Their masks and a grammar's could leave no token to choose.
  structured::Constraint regex{structured::Constraint::Kind::kRegex, "a+", {}, "guided_regex"};
  EXPECT_EQ(with([&](auto& g) {
              g.constraint = regex;
              g.allowed_token_ids = std::vector<std::int64_t>{1};
            }),
            "allowed_token_ids");
  EXPECT_EQ(with([&](auto& g) {
              g.constraint = regex;
              g.bad_words = {"x"};
            }),
            "bad_words");
}

TEST(PromptTruncation, MinusOneIsTheContextElseOneToIt) {
  const Limits l = TestLimits();
  auto keep = [&](std::optional<std::int64_t> k) {
    GenerationFields f;
    f.truncate_prompt_tokens = k;
    return PromptTruncation(f, l);
  };
  ASSERT_TRUE(keep(std::nullopt).ok());
  EXPECT_FALSE(keep(std::nullopt)->has_value());
  EXPECT_EQ(**keep(-1), 1000u);
  EXPECT_EQ(**keep(1), 1u);
  EXPECT_EQ(**keep(1000), 1000u);
  for (std::int64_t bad :
       {std::int64_t{0}, std::int64_t{-2}, std::int64_t{1001}, std::numeric_limits<std::int64_t>::min()})
    EXPECT_EQ(keep(bad).status().param(), "truncate_prompt_tokens") << bad;
}

TEST(ValidateGeneration, ContextOverflowIsNamedAsOpenAiNamesIt) {
  GenerationFields f;
  f.max_tokens = 995;
  auto v = V(f);
  EXPECT_EQ(Param(v), "max_tokens");
  EXPECT_EQ(v.status().reason(), "context_length_exceeded");
  auto p = V({}, Endpoint::kCompletions, {1000});
  EXPECT_EQ(Param(p), "prompt");
  EXPECT_EQ(p.status().reason(), "context_length_exceeded");
}

TEST(ValidatePromptIds, IdsMustBeInTheVocabulary) {
  EXPECT_TRUE(ValidatePromptIds({0, 499}, TestLimits(), "prompt").ok());
  EXPECT_EQ(ValidatePromptIds({1, 500}, TestLimits(), "prompt").param(), "prompt");
  EXPECT_EQ(ValidatePromptIds({-1}, TestLimits(), "prompt_ids").param(), "prompt_ids");
  EXPECT_FALSE(ValidatePromptIds({}, TestLimits(), "prompt").ok());
}

TEST(ValidateQa, DefaultsAndRanges) {
  auto d = ValidateQa({}, 512);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->windows.max_seq_len, 384);
  EXPECT_FALSE(d->windows.doc_stride.has_value());  // min(max_seq_len / 2, 128) in BuildWindows
  EXPECT_EQ(d->windows.max_question_len, 64);
  EXPECT_EQ(d->options.top_k, 1);
  EXPECT_EQ(d->options.max_answer_len, 15);
  EXPECT_EQ(d->options.scoring, qa::Scoring::kPipeline);
  // A model with short positions: the default window shrinks to fit.
  EXPECT_EQ(ValidateQa({}, 128)->windows.max_seq_len, 128);

  auto param = [](QaFields f, std::int64_t max_pos = 512) {
    auto v = ValidateQa(f, max_pos);
    return v.ok() ? std::string() : v.status().param();
  };
  QaFields f;
  f.max_seq_len = 1000;  // beyond the model
  EXPECT_EQ(param(f), "max_seq_len");
  f = {};
  f.max_seq_len = 8;
  f.doc_stride = 5;  // more than half a window
  EXPECT_EQ(param(f), "doc_stride");
  f.doc_stride = 4;
  EXPECT_EQ(param(f), "");
  f = {};
  f.top_k = 0;
  EXPECT_EQ(param(f), "top_k");
  f = {};
  f.scoring = "best";
  EXPECT_EQ(param(f), "scoring");
  f = {};
  f.offset_unit = "utf32";
  EXPECT_EQ(param(f), "offset_unit");
  f.offset_unit = "utf8_byte";
  EXPECT_EQ(ValidateQa(f, 512)->offset_unit, qa::OffsetUnit::kUtf8Byte);
  EXPECT_EQ(d->offset_unit, qa::OffsetUnit::kCodePoint);
  f = {};
  f.max_seq_len = 32;
  f.max_answer_len = 40;
  EXPECT_EQ(param(f), "max_answer_len");
  f = {};
  f.null_score_diff_threshold = std::nan("");
  EXPECT_EQ(param(f), "null_score_diff_threshold");
}

}  // namespace
}  // namespace ropeserve::service
