// The span models (ModernBERT, RoFormer, and Llama/Qwen2/Qwen3 trunks with
// qa_outputs) on tiny random checkpoints from the generator: the serving
// path equals the per-window reference path within rounding, a window's
// logits are bitwise the same whatever it is batched with, and the whole
// QA flow (windows -> model -> answer selection) gives answers
// that are exact substrings of the context.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>

#include "server/checkpoint/model_generator.h"
#include "server/models/decoder.h"
#include "server/models/span_model_loader.h"
#include "server/qa/span_scoring.h"
#include "server/qa/windows.h"
#include "server/tokenizer/unicode.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/common/float_bounds.h"
#include "tests/models/reference_decoder.h"

namespace ropeserve {
namespace {

class Encoder : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    MakeEncoderOptions o;
    o.seed = 3;
    o.arch = GetParam();
    ASSERT_TRUE(MakeEncoderModel(dir_.path(), o).ok());
    auto m = LoadSpanModel(dir_.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
  }
  // The reference path of `m` (loaded from dir_ in `dtype`): the model's
  // own, or for the decoder trunks the tests' dense oracle over the same
  // checkpoint (the server does not link it).
  StatusOr<SpanLogits> Reference(const SpanModel& m, DType dtype, const std::vector<TokenId>& ids,
                                 const std::vector<std::uint32_t>& types = {}, bool with_hidden = false) const {
    if (m.config().family != EncoderFamily::kDecoder) return m.ForwardReference(ids, types, with_hidden);
    RS_ASSIGN_OR_RETURN(auto decoder, DecoderModel::LoadSpanModel(dir_.path(), dtype));
    return testing::ReferenceSpanWindow(*decoder, ids, with_hidden);
  }
  testing::ScratchDir dir_;
  std::unique_ptr<SpanModel> model_;
};

// Windows of the given lengths with pseudo-random ids, and token types
// with the second half of each window in segment 1.
struct TestWindows {
  std::vector<std::vector<TokenId>> ids;
  std::vector<std::vector<std::uint32_t>> types;
};
TestWindows MakeWindows(const std::vector<int>& lengths, std::uint32_t seed = 7) {
  TestWindows t;
  std::uint32_t next = seed;
  for (int len : lengths) {
    std::vector<TokenId> w;
    std::vector<std::uint32_t> types(static_cast<std::size_t>(len), 0);
    for (int i = 0; i < len; ++i) w.push_back(static_cast<TokenId>(next = (next * 31 + 11) % 509));
    for (std::size_t i = w.size() / 2; i < w.size(); ++i) types[i] = 1;
    t.ids.push_back(std::move(w));
    t.types.push_back(std::move(types));
  }
  return t;
}

// The longest reduction in a forward over windows of up to `longest`
// tokens: a GEMM over the hidden or intermediate size, or attention over
// the window.
std::int64_t LongestReduction(const EncoderConfig& c, std::int64_t longest) {
  return std::max({c.hidden_size, c.intermediate_size, longest});
}

TEST_P(Encoder, ServingPathEqualsReferenceAcrossWindowLengths) {
  // ModernBERT: layers 0 and 3 are global, 1 and 2 see +-8 tokens: windows
  // shorter and much longer than the band, and longer than the 64-token
  // query block.
  if (model_->config().family == EncoderFamily::kModernBert) {
    EXPECT_EQ(model_->config().global_layers, (std::vector<bool>{true, false, false, true}));
  }
  const TestWindows t = MakeWindows({1, 5, 17, 40, 130});
  auto fast = model_->ForwardWindows(t.ids, t.types);
  ASSERT_TRUE(fast.ok()) << fast.status().ToString();
  ASSERT_EQ(fast->size(), t.ids.size());
  double max_diff = 0, max_abs = 0;
  for (std::size_t k = 0; k < t.ids.size(); ++k) {
    auto ref = Reference(*model_, DType::kF32, t.ids[k], t.types[k]);
    ASSERT_TRUE(ref.ok());
    ASSERT_EQ((*fast)[k].start.size(), t.ids[k].size());
    for (std::size_t i = 0; i < t.ids[k].size(); ++i) {
      max_diff = std::max({max_diff, static_cast<double>(std::abs(ref->start[i] - (*fast)[k].start[i])),
                           static_cast<double>(std::abs(ref->end[i] - (*fast)[k].end[i]))});
      max_abs =
          std::max({max_abs, static_cast<double>(std::abs(ref->start[i])), static_cast<double>(std::abs(ref->end[i]))});
    }
  }
  const EncoderConfig& c = model_->config();
  EXPECT_LE(max_diff, testing::RoundingBound(LongestReduction(c, 130), c.num_hidden_layers, max_abs))
      << "largest |logit| " << max_abs;
  EXPECT_GT(max_abs, 0.1);  // the logits are not degenerate
}

// A window's logits are bitwise the same alone and in batches of any
// composition (before, after, between other windows of other lengths), in
// float32 and bfloat16: a request's answer never depends on the load.
TEST_P(Encoder, WindowLogitsDoNotDependOnTheBatch) {
  auto bf = LoadSpanModel(dir_.path(), DType::kBF16);
  ASSERT_TRUE(bf.ok()) << bf.status().ToString();
  const TestWindows t = MakeWindows({23, 1, 64, 5, 130, 17, 40}, 11);
  const std::vector<std::vector<std::size_t>> batches = {{0}, {1, 0}, {0, 2}, {3, 4, 0, 5}, {6, 5, 4, 3, 2, 1, 0}};
  for (const SpanModel* m : {model_.get(), bf->get()}) {
    std::optional<SpanLogits> alone;
    for (const auto& batch : batches) {
      std::vector<std::vector<TokenId>> ids;
      std::vector<std::vector<std::uint32_t>> types;
      std::size_t at = 0;
      for (std::size_t b : batch) {
        if (b == 0) at = ids.size();
        ids.push_back(t.ids[b]);
        types.push_back(t.types[b]);
      }
      auto out = m->ForwardWindows(ids, types, /*with_hidden=*/true);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      const SpanLogits& w = (*out)[at];
      if (!alone) {
        alone = w;
        continue;
      }
      EXPECT_EQ(w.start, alone->start) << "batch of " << batch.size();
      EXPECT_EQ(w.end, alone->end) << "batch of " << batch.size();
      EXPECT_EQ(w.hidden, alone->hidden) << "batch of " << batch.size();
    }
  }
}

TEST_P(Encoder, QuestionAnsweringGivesContextSubstrings) {
  auto tok = tok::Tokenizer::FromPath(dir_.path());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  std::string context;
  for (int i = 0; i < 12; ++i)
    context += "the quick brown fox jumps over the lazy dog number " + std::to_string(i) + ". ";
  qa::WindowOptions wo;
  wo.max_seq_len = 48;
  wo.doc_stride = 16;
  auto windows = qa::BuildWindows(**tok, "where does the fox jump", context, wo);
  ASSERT_TRUE(windows.ok()) << windows.status().ToString();
  ASSERT_GE(windows->size(), 3u);
  EXPECT_EQ((*windows)[0].window.p_mask[0], 0);  // [CLS] open for the null answer
  std::vector<std::vector<TokenId>> ids;
  std::vector<std::vector<std::uint32_t>> types;
  for (const auto& w : *windows) {
    ids.push_back(w.ids);
    types.push_back(w.type_ids);
  }
  auto logits = model_->ForwardWindows(ids, types);
  ASSERT_TRUE(logits.ok());
  std::vector<qa::QaWindow> scored;
  for (std::size_t k = 0; k < windows->size(); ++k) {
    qa::QaWindow w = (*windows)[k].window;
    w.start_logits = (*logits)[k].start;
    w.end_logits = (*logits)[k].end;
    scored.push_back(std::move(w));
  }
  const auto cps = tok::CountCodePoints(context);
  for (qa::Scoring mode : {qa::Scoring::kPipeline, qa::Scoring::kLogits}) {
    qa::QaOptions o;
    o.scoring = mode;
    o.top_k = 3;
    o.handle_impossible_answer = true;
    auto answers = qa::SelectAnswers(scored, context, o);
    ASSERT_TRUE(answers.ok()) << answers.status().ToString();
    ASSERT_FALSE(answers->empty());
    for (const auto& a : *answers) {
      ASSERT_LE(a.start, a.end);
      ASSERT_LE(a.end, static_cast<std::int64_t>(cps));
      // context[start:end] == text (ASCII context: code points are bytes).
      EXPECT_EQ(context.substr(static_cast<std::size_t>(a.start), static_cast<std::size_t>(a.end - a.start)), a.text);
    }
  }
}

TEST_P(Encoder, LastHiddenStateMatchesAcrossPaths) {
  const std::vector<TokenId> a = {9, 40, 41, 300, 7, 8, 120}, b = {11, 12, 13};
  auto fast = model_->ForwardWindows({a, b}, {}, /*with_hidden=*/true);
  auto ref = Reference(*model_, DType::kF32, a, {}, /*with_hidden=*/true);
  ASSERT_TRUE(fast.ok() && ref.ok());
  const EncoderConfig& c = model_->config();
  const auto H = static_cast<std::size_t>(c.hidden_size);
  ASSERT_EQ(ref->hidden.size(), a.size() * H);
  ASSERT_EQ((*fast)[1].hidden.size(), b.size() * H);
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < ref->hidden.size(); ++i) {
    diff = std::max<double>(diff, std::abs(ref->hidden[i] - (*fast)[0].hidden[i]));
    scale = std::max<double>(scale, std::abs(ref->hidden[i]));
  }
  EXPECT_LE(diff, testing::RoundingBound(LongestReduction(c, 7), c.num_hidden_layers, scale));
  EXPECT_TRUE(model_->ForwardWindows({a}, {})->front().hidden.empty());  // only when asked
}

// bfloat16 compute stays close to float32 (the exact path) and its packed
// path close to its own reference path.
TEST_P(Encoder, BFloat16IsCloseToFloat32) {
  auto bf = LoadSpanModel(dir_.path(), DType::kBF16);
  ASSERT_TRUE(bf.ok()) << bf.status().ToString();
  std::vector<std::vector<TokenId>> windows = {{9, 40, 41, 300, 7, 8, 120, 4, 5, 6, 77, 78, 79, 80, 81, 82, 83},
                                               {11, 12, 13}};
  auto f32 = model_->ForwardWindows(windows);
  auto b16 = (*bf)->ForwardWindows(windows);
  auto b16_ref = Reference(**bf, DType::kBF16, windows[0]);
  ASSERT_TRUE(f32.ok() && b16.ok() && b16_ref.ok());
  double diff = 0, ref_diff = 0, scale = 0;
  for (std::size_t k = 0; k < windows.size(); ++k)
    for (std::size_t i = 0; i < windows[k].size(); ++i) {
      diff = std::max<double>(diff, std::abs((*f32)[k].start[i] - (*b16)[k].start[i]));
      scale = std::max<double>(scale, std::abs((*f32)[k].start[i]));
    }
  for (std::size_t i = 0; i < windows[0].size(); ++i)
    ref_diff = std::max<double>(ref_diff, std::abs(b16_ref->start[i] - (*b16)[0].start[i]));
  // bf16 keeps ~3 significant digits; through 3-4 layers of these random
  // (large) weights that is 1-6% of the largest logit. A wrong dtype or
  // layout shows as errors of the logits' own size.
  EXPECT_LT(diff, 0.1 * std::max(scale, 1.0)) << "largest |logit| " << scale;
  EXPECT_LT(ref_diff, 0.1 * std::max(scale, 1.0));
  EXPECT_GT(diff, 0.0);  // it really computed in bfloat16
  EXPECT_FALSE(LoadSpanModel(dir_.path(), DType::kF16).ok());
}

class DecoderSpan : public Encoder {};

TEST_P(DecoderSpan, AttendsCausally) {
  ASSERT_EQ(model_->config().family, EncoderFamily::kDecoder);
  // Appending tokens leaves the logits of the earlier ones unchanged (up
  // to the rounding of GEMMs with more rows).
  const std::vector<TokenId> prefix = {5, 17, 250, 3}, longer = {5, 17, 250, 3, 99, 100};
  auto p = model_->ForwardWindows({prefix, longer});
  ASSERT_TRUE(p.ok());
  double scale = 0;
  for (float v : (*p)[1].start) scale = std::max<double>(scale, std::abs(v));
  for (float v : (*p)[1].end) scale = std::max<double>(scale, std::abs(v));
  const EncoderConfig& c = model_->config();
  const double bound = testing::RoundingBound(LongestReduction(c, 6), c.num_hidden_layers, scale);
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    EXPECT_NEAR((*p)[0].start[i], (*p)[1].start[i], bound);
    EXPECT_NEAR((*p)[0].end[i], (*p)[1].end[i], bound);
  }
  // A changed later token would change them by the logits' own size.
  auto changed = model_->ForwardWindows({{5, 17, 250, 4}});
  ASSERT_TRUE(changed.ok());
  EXPECT_GT(std::abs((*changed)[0].start[2] - (*p)[0].start[2]) + std::abs((*changed)[0].start[3] - (*p)[0].start[3]),
            bound);
}

INSTANTIATE_TEST_SUITE_P(Families, Encoder, ::testing::Values("modernbert", "roformer", "llama", "qwen2", "qwen3"));
INSTANTIATE_TEST_SUITE_P(Decoders, DecoderSpan, ::testing::Values("llama", "qwen2", "qwen3"));

// RoFormer's token types matter (segment embeddings).
TEST(RoFormer, TokenTypesChangeTheLogits) {
  testing::ScratchDir dir;
  MakeEncoderOptions o;
  o.arch = "roformer";
  ASSERT_TRUE(MakeEncoderModel(dir.path(), o).ok());
  auto m = LoadSpanModel(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->config().family, EncoderFamily::kRoFormer);
  auto a = (*m)->ForwardReference({5, 6, 7, 8}, {0, 0, 0, 0});
  auto b = (*m)->ForwardReference({5, 6, 7, 8}, {0, 0, 1, 1});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->start, b->start);
  EXPECT_FALSE((*m)->ForwardReference({5, 6}, {0, 2}).ok());  // type 2 of 2
}

TEST(EncoderLoad, BadCheckpointsAreClearErrors) {
  testing::ScratchDir dir;
  MakeEncoderOptions o;
  ASSERT_TRUE(MakeEncoderModel(dir.path(), o).ok());
  // A config that disagrees with the weights.
  {
    std::ifstream in(dir / "config.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto at = text.find("\"intermediate_size\": 96");
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, 23, "\"intermediate_size\": 80");
    std::ofstream(dir / "config.json") << text;
  }
  auto m = LoadSpanModel(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("mlp.Wi.weight"), std::string::npos) << m.status().ToString();
  EXPECT_FALSE(LoadSpanModel(dir / "missing").ok());
  // Ids outside the vocabulary, empty windows.
  testing::ScratchDir good;
  ASSERT_TRUE(MakeEncoderModel(good.path(), o).ok());
  auto ok = LoadSpanModel(good.path());
  ASSERT_TRUE(ok.ok());
  EXPECT_FALSE((*ok)->ForwardReference({1, 100000}).ok());
  EXPECT_FALSE((*ok)->ForwardWindows({{1, 2}, {}}).ok());
}

TEST(DecoderSpanHead, LoadsEitherTrunkPrefixAndIsRefusedAsACausalLm) {
  testing::ScratchDir dir;
  MakeEncoderOptions o;
  o.arch = "llama";
  ASSERT_TRUE(MakeEncoderModel(dir.path(), o).ok());
  auto as_lm = DecoderModel::Load(dir.path(), DType::kF32);
  ASSERT_FALSE(as_lm.ok());
  EXPECT_NE(as_lm.status().message().find("--qa"), std::string::npos) << as_lm.status().ToString();
  auto m = LoadSpanModel(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->config().architecture, "LlamaForQuestionAnswering");
  auto before = (*m)->ForwardWindows({{5, 6, 7}});
  ASSERT_TRUE(before.ok());
  // Its reference window is test code (tests/models/reference_decoder.h).
  EXPECT_EQ((*m)->ForwardReference({5, 6, 7}).status().code(), ErrorCode::kUnimplemented);
  // The same weights with the trunk named "model." (some checkpoints of
  // these classes): rewrite the safetensors header's names.
  {
    const auto path = dir / "model.safetensors";
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    std::string header = bytes.substr(8, n);
    const std::string data = bytes.substr(8 + n);
    for (std::size_t at; (at = header.find("\"transformer.")) != std::string::npos;) header.replace(at, 13, "\"model.");
    n = header.size();
    std::string out(8, '\0');
    std::memcpy(out.data(), &n, 8);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << out << header << data;
  }
  auto renamed = LoadSpanModel(dir.path());
  ASSERT_TRUE(renamed.ok()) << renamed.status().ToString();
  auto after = (*renamed)->ForwardWindows({{5, 6, 7}});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(before->front().start, after->front().start);
}

}  // namespace
}  // namespace ropeserve
