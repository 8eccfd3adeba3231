// Classifier heads on tiny random checkpoints from the generator
// (ModernBert/RoFormer/Qwen3/LlamaForSequenceClassification,
// ModernBert/RoFormerForTokenClassification): the logits equal the head
// computed in float64 from the checkpoint's weights on the serving path's
// own hidden state (the trunk's parity is encoder_test's and
// embedding_test's), the serving path equals the reference path within
// rounding, and service::EncoderService classifies and scores pairs with
// the activations vLLM and transformers apply, an input's scores bitwise
// the same alone, batched and inside an engine's steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>

#include "server/checkpoint/config_overrides.h"
#include "server/checkpoint/model_generator.h"
#include "server/checkpoint/safetensors.h"
#include "server/engine/engine.h"
#include "server/models/decoder.h"
#include "server/models/span_model_loader.h"
#include "server/serving/service_factory.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/common/float_bounds.h"
#include "tests/engine/decoding_engine.h"
#include "tests/models/reference_decoder.h"

namespace ropeserve {
namespace {

using Input = service::EncoderInput;

// A float32 checkpoint's tensors as float64, by name.
class Weights {
 public:
  explicit Weights(const std::string& path) {
    auto f = SafetensorsFile::Open(path);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (f.ok()) file_ = std::move(*f);
  }
  bool Has(const std::string& name) const { return file_ && file_->Find(name) != nullptr; }
  std::vector<double> operator()(const std::string& name) const {
    const TensorInfo* info = file_ ? file_->Find(name) : nullptr;
    EXPECT_NE(info, nullptr) << name;
    if (info == nullptr) return {};
    EXPECT_EQ(info->dtype, DType::kF32) << name;
    std::vector<float> f(static_cast<std::size_t>(info->numel()));
    std::memcpy(f.data(), file_->Data(*info), f.size() * sizeof(float));
    return std::vector<double>(f.begin(), f.end());
  }

 private:
  std::unique_ptr<SafetensorsFile> file_;
};

// y = W x (+ b), W [out, in] row-major; `scale` gathers the largest
// sum |W_ij x_j| + |b_i| (what the rounding bound scales with).
std::vector<double> Affine(const std::vector<double>& w, const std::vector<double>* b, const std::vector<double>& x,
                           double& scale) {
  const std::size_t in = x.size(), out = w.size() / in;
  std::vector<double> y(out);
  for (std::size_t i = 0; i < out; ++i) {
    double sum = b ? (*b)[i] : 0, mag = b ? std::abs((*b)[i]) : 0;
    for (std::size_t j = 0; j < in; ++j) {
      sum += w[i * in + j] * x[j];
      mag += std::abs(w[i * in + j] * x[j]);
    }
    y[i] = sum;
    scale = std::max(scale, mag);
  }
  return y;
}

std::vector<double> Gelu(std::vector<double> x) {  // exact (erf) GELU: transformers' "gelu"
  for (double& v : x) v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  return x;
}

std::vector<double> LayerNorm(std::vector<double> x, const std::vector<double>& weight, double eps) {
  const double n = static_cast<double>(x.size());
  const double mean = std::accumulate(x.begin(), x.end(), 0.0) / n;
  double var = 0;
  for (double v : x) var += (v - mean) * (v - mean);
  var /= n;
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = (x[i] - mean) / std::sqrt(var + eps) * weight[i];
  return x;
}

class Classifier : public ::testing::TestWithParam<const char*> {
 public:
  void SetUp() override { Make("sequence", {"neg", "neutral", "pos"}); }
  void Make(const std::string& head, std::vector<std::string> labels, const std::string& pooling = "") {
    MakeEncoderOptions o;
    o.seed = 9;
    o.arch = GetParam();
    o.head = head;
    o.labels = std::move(labels);
    o.max_position_embeddings = 128;
    ASSERT_TRUE(MakeEncoderModel(dir_.path(), o).ok());
    if (!pooling.empty()) {  // ModernBERT's classifier_pooling, edited into config.json
      std::ifstream in(dir_ / "config.json");
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      text.insert(text.rfind('}'), ",\"classifier_pooling\":\"" + pooling + "\"");
      std::ofstream(dir_ / "config.json") << text;
    }
    auto m = LoadSpanModel(dir_.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
  }
  const EncoderConfig& config() const { return model_->config(); }
  bool decoder() const { return config().family == EncoderFamily::kDecoder; }

  // The head in float64 on `hidden` [len, H]: the logits of the pooled row
  // (sequence) or of every row (token), and the rounding bound of their
  // float32 computation.
  std::vector<double> Head(const std::vector<float>& hidden, std::int64_t len, double& bound) const {
    const Weights w(dir_ / "model.safetensors");
    const auto H = static_cast<std::size_t>(config().hidden_size);
    auto row = [&](std::int64_t t) {
      return std::vector<double>(hidden.begin() + static_cast<std::ptrdiff_t>(t * H),
                                 hidden.begin() + static_cast<std::ptrdiff_t>((t + 1) * H));
    };
    std::vector<std::vector<double>> rows;
    double scale = 0;
    if (config().head == EncoderHead::kToken) {
      for (std::int64_t t = 0; t < len; ++t) rows.push_back(row(t));
    } else if (decoder()) {
      rows.push_back(row(len - 1));  // the last token
    } else if (config().classifier_pooling == "mean" && config().family == EncoderFamily::kModernBert) {
      std::vector<double> mean(H, 0.0);
      for (std::int64_t t = 0; t < len; ++t)
        for (std::size_t d = 0; d < H; ++d) mean[d] += row(t)[d] / static_cast<double>(len);
      for (double v : mean) scale = std::max(scale, std::abs(v));
      rows.push_back(mean);
    } else {
      rows.push_back(row(0));  // CLS
    }
    std::vector<double> out;
    for (const auto& x : rows) {
      std::vector<double> y;
      if (decoder()) {
        y = Affine(w("score.weight"), nullptr, x, scale);
      } else if (config().family == EncoderFamily::kModernBert) {
        const auto cb = w("classifier.bias");
        std::vector<double> h = Gelu(Affine(w("head.dense.weight"), nullptr, x, scale));
        for (double v : h) scale = std::max(scale, std::abs(v));
        h = LayerNorm(h, w("head.norm.weight"), config().norm_eps);
        for (double v : h) scale = std::max(scale, std::abs(v));
        y = Affine(w("classifier.weight"), &cb, h, scale);
      } else if (config().head == EncoderHead::kToken) {
        const auto b = w("classifier.bias");
        y = Affine(w("classifier.weight"), &b, x, scale);
      } else {  // RoFormerClassificationHead
        const auto db = w("classifier.dense.bias"), ob = w("classifier.out_proj.bias");
        std::vector<double> h = Gelu(Affine(w("classifier.dense.weight"), &db, x, scale));
        y = Affine(w("classifier.out_proj.weight"), &ob, h, scale);
      }
      out.insert(out.end(), y.begin(), y.end());
    }
    // Three reductions of length H (dense, norm, classifier), plus the mean's of length len.
    bound = testing::RoundingBound(std::max<std::int64_t>(config().hidden_size, len), 4, std::max(scale, 1.0));
    return out;
  }
  testing::ScratchDir dir_;
  std::unique_ptr<SpanModel> model_;
};

const std::vector<std::vector<TokenId>> kWindows = {{5, 9, 13, 2}, {7}, {300, 4, 4, 9, 100, 17, 60, 61, 62, 3}};

void ExpectHeadMatches(Classifier& t, const SpanModel& model) {
  auto out = model.ForwardWindows(kWindows, {}, /*with_hidden=*/true);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  for (std::size_t k = 0; k < kWindows.size(); ++k) {
    const auto len = static_cast<std::int64_t>(kWindows[k].size());
    double bound = 0;
    const std::vector<double> expected = t.Head((*out)[k].hidden, len, bound);
    const std::vector<float>& got = (*out)[k].classes;
    ASSERT_EQ(got.size(), expected.size()) << "window " << k;
    double largest = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], expected[i], bound) << "window " << k << " logit " << i;
      largest = std::max(largest, std::abs(expected[i]));
    }
    EXPECT_GT(largest, 0.05);  // not degenerate
  }
}

TEST_P(Classifier, SequenceLogitsEqualTheHeadInFloat64) {
  EXPECT_EQ(config().head, EncoderHead::kSequence);
  EXPECT_EQ(config().labels, (std::vector<std::string>{"neg", "neutral", "pos"}));
  EXPECT_EQ(config().classify_activation, ScoreActivation::kSoftmax);
  ExpectHeadMatches(*this, *model_);
}

TEST_P(Classifier, MeanPoolingAndTokenHeads) {
  if (decoder()) GTEST_SKIP() << "decoders classify the last token; token classifiers are encoders";
  if (GetParam() == std::string("modernbert")) {
    Make("sequence", {"a", "b"}, "mean");
    EXPECT_EQ(config().classifier_pooling, "mean");
    ExpectHeadMatches(*this, *model_);
  }
  Make("token", {"O", "B-PER", "I-PER", "B-LOC"});
  EXPECT_EQ(config().head, EncoderHead::kToken);
  ExpectHeadMatches(*this, *model_);
}

// The serving path against the reference path (Hugging Face's eager
// modules; the tests' dense oracle for the decoder trunks).
TEST_P(Classifier, ServingPathEqualsTheReference) {
  for (const auto& ids : kWindows) {
    StatusOr<SpanLogits> ref = Status::Ok();
    if (decoder()) {
      auto d = DecoderModel::LoadClassifier(dir_.path(), DType::kF32);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      ref = testing::ReferenceSpanWindow(**d, ids, true);
    } else {
      ref = model_->ForwardReference(ids, {}, true);
    }
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    auto got = model_->ForwardWindows({ids});
    ASSERT_TRUE(got.ok());
    ASSERT_EQ((*got)[0].classes.size(), ref->classes.size());
    double scale = 1;
    for (float v : ref->classes) scale = std::max(scale, static_cast<double>(std::abs(v)));
    const double bound = testing::RoundingBound(std::max(config().intermediate_size, config().hidden_size),
                                                config().num_hidden_layers + 4, scale);
    for (std::size_t i = 0; i < ref->classes.size(); ++i) EXPECT_NEAR((*got)[0].classes[i], ref->classes[i], bound);
  }
}

TEST_P(Classifier, ServiceClassifiesWithTheActivationAndIsBatchInvariant) {
  auto s = LoadEncoderService(dir_.path(), "cls");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  service::EncoderService& svc = **s;
  EXPECT_TRUE(svc.classifies());
  EXPECT_FALSE(svc.scores_pairs());  // three labels: not a cross-encoder
  EXPECT_STREQ(svc.task(), "classify");
  service::ClassifyOptions raw;
  raw.activation = service::ClassifyOptions::Activation::kNone;
  auto logits = svc.Classify({Input::Text("the owl sleeps")}, raw);
  auto probs = svc.Classify({Input::Text("the owl sleeps")}, {});
  ASSERT_TRUE(logits.ok() && probs.ok()) << logits.status().ToString();
  const std::vector<float>& l = (*logits)[0].scores;
  const std::vector<float>& p = (*probs)[0].scores;
  ASSERT_EQ(p.size(), 3u);
  // Softmax, computed here in float64 from the logits.
  double sum = 0;
  for (float v : l) sum += std::exp(static_cast<double>(v));
  for (std::size_t k = 0; k < 3; ++k) EXPECT_NEAR(p[k], std::exp(static_cast<double>(l[k])) / sum, 4e-7);
  // The model's own forward on the tokenized text gives the same logits.
  auto enc = svc.tokenizer().Encode("the owl sleeps", true);
  ASSERT_TRUE(enc.ok());
  auto direct = model_->ForwardWindows({enc->ids});
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ((*direct)[0].classes, l);
  EXPECT_EQ((*logits)[0].tokens, static_cast<std::int64_t>(enc->ids.size()));
  // Alone, batched, and in an engine's steps beside a decode: bitwise equal.
  auto batch = svc.Classify({Input::Text("a much longer input that makes the batch uneven"),
                             Input::Text("the owl sleeps"), Input::Pair("x", "y")},
                            raw);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ((*batch)[1].scores, l);
  testing::DecodingEngine running(16);
  service::EncoderServiceOptions eo;
  eo.engine = &running.engine();
  auto stepped = LoadEncoderService(dir_.path(), "cls", eo);
  ASSERT_TRUE(stepped.ok());
  auto in_steps = (*stepped)->Classify({Input::Text("the owl sleeps"), Input::Pair("x", "y")}, raw);
  ASSERT_TRUE(in_steps.ok()) << in_steps.status().ToString();
  EXPECT_EQ((*in_steps)[0].scores, l);
  EXPECT_EQ((*in_steps)[1].scores, (*batch)[2].scores);
  EXPECT_GT(running.engine().stats().encoder_tokens.load(), 0u);
  running.FinishDecode();
  // A classifier neither embeds nor scores pairs.
  EXPECT_EQ(svc.Embed({Input::Text("a")}, {}).status().code(), ErrorCode::kFailedPrecondition);
  service::EncoderService::ScorePairs pairs;
  pairs.queries = {"q"};
  pairs.documents = {"d"};
  EXPECT_EQ(svc.Score(pairs, {}).status().code(), ErrorCode::kFailedPrecondition);
}

// Token classification through the service: with aggregation "none" and
// nothing ignored, one entity per token that is not special, its label the
// argmax and its score the softmax (computed here in float64) of the
// model's own logits for the tokenized text, its offsets the tokenizer's;
// grouped entities are qa::GroupEntities of those logits (its rules are
// token_entities_test's); bitwise the same alone, batched and in an
// engine's steps.
TEST_P(Classifier, ServiceClassifiesTokens) {
  if (decoder()) GTEST_SKIP() << "token classifiers are encoders";
  const std::vector<std::string> labels = {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"};
  Make("token", labels);
  auto s = LoadEncoderService(dir_.path(), "ner");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  service::EncoderService& svc = **s;
  EXPECT_TRUE(svc.classifies_tokens());
  EXPECT_FALSE(svc.classifies() || svc.embeds() || svc.scores_pairs());
  EXPECT_STREQ(svc.task(), "token_classify");
  const std::string text = "ann lee walks to paris";
  service::TokenClassifyOptions none;
  none.aggregation = qa::Aggregation::kNone;
  none.ignore_labels = {};
  auto got = svc.ClassifyTokens({Input::Text(text)}, none);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto enc = svc.tokenizer().Encode(text, true);
  ASSERT_TRUE(enc.ok());
  auto direct = model_->ForwardWindows({enc->ids});
  ASSERT_TRUE(direct.ok());
  const std::vector<float>& logits = (*direct)[0].classes;
  const std::size_t L = labels.size();
  std::size_t specials = 0;
  for (auto m : enc->special_tokens_mask) specials += m;
  ASSERT_EQ((*got)[0].entities.size(), enc->size() - specials);
  EXPECT_EQ((*got)[0].tokens, static_cast<std::int64_t>(enc->size()));
  for (const qa::Entity& e : (*got)[0].entities) {
    const auto i = static_cast<std::size_t>(e.index);
    ASSERT_LT(i, enc->size());
    EXPECT_FALSE(enc->special_tokens_mask[i]);
    std::size_t best = 0;
    for (std::size_t k = 0; k < L; ++k)
      if (logits[i * L + k] > logits[i * L + best]) best = k;
    double denom = 0;  // the best label's probability is 1 / sum exp(l - l_best)
    for (std::size_t k = 0; k < L; ++k)
      denom += std::exp(static_cast<double>(logits[i * L + k]) - logits[i * L + best]);
    EXPECT_EQ(e.label, labels[best]);
    EXPECT_NEAR(e.score, 1 / denom, 1e-12);
    EXPECT_EQ(e.word, enc->tokens[i]);
    EXPECT_EQ(e.start, static_cast<std::int64_t>(enc->offsets[i].start));
    EXPECT_EQ(e.end, static_cast<std::int64_t>(enc->offsets[i].end));
  }
  service::TokenClassifyOptions simple;  // the default: simple, "O" ignored
  auto grouped = svc.ClassifyTokens({Input::Text(text)}, simple);
  ASSERT_TRUE(grouped.ok());
  auto expected = qa::GroupEntities({text, *enc, logits, labels}, svc.tokenizer(), qa::Aggregation::kSimple, {"O"});
  ASSERT_TRUE(expected.ok());
  ASSERT_EQ((*grouped)[0].entities.size(), expected->size());
  for (std::size_t k = 0; k < expected->size(); ++k) {
    EXPECT_EQ((*grouped)[0].entities[k].label, (*expected)[k].label);
    EXPECT_EQ((*grouped)[0].entities[k].score, (*expected)[k].score);
    EXPECT_EQ((*grouped)[0].entities[k].word, (*expected)[k].word);
  }
  // Alone, batched, in an engine's steps: the same entities, bitwise.
  auto same = [](const qa::Entity& a, const qa::Entity& b) {
    return a.label == b.label && a.score == b.score && a.word == b.word && a.start == b.start && a.end == b.end;
  };
  auto batch = svc.ClassifyTokens(
      {Input::Text("a much longer text that makes the batch uneven, truly"), Input::Text(text)}, none);
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ((*batch)[1].entities.size(), (*got)[0].entities.size());
  for (std::size_t k = 0; k < (*got)[0].entities.size(); ++k)
    EXPECT_TRUE(same((*batch)[1].entities[k], (*got)[0].entities[k])) << k;
  testing::DecodingEngine running(16);
  service::EncoderServiceOptions eo;
  eo.engine = &running.engine();
  auto stepped = LoadEncoderService(dir_.path(), "ner", eo);
  ASSERT_TRUE(stepped.ok());
  auto in_steps = (*stepped)->ClassifyTokens({Input::Text(text)}, none);
  ASSERT_TRUE(in_steps.ok()) << in_steps.status().ToString();
  ASSERT_EQ((*in_steps)[0].entities.size(), (*got)[0].entities.size());
  for (std::size_t k = 0; k < (*got)[0].entities.size(); ++k)
    EXPECT_TRUE(same((*in_steps)[0].entities[k], (*got)[0].entities[k])) << k;
  running.FinishDecode();
  // Token ids and pairs are refused (entities need the text); a token
  // classifier neither classifies sequences nor embeds.
  auto ids = svc.ClassifyTokens({Input::Text("fine"), Input::Ids({5, 6})}, none);
  EXPECT_EQ(ids.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ids.status().param(), "input[1]");
  EXPECT_EQ(svc.ClassifyTokens({Input::Pair("a", "b")}, none).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(svc.Classify({Input::Text("a")}, {}).status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(svc.Embed({Input::Text("a")}, {}).status().code(), ErrorCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Families, Classifier, ::testing::Values("modernbert", "roformer", "qwen3", "llama"));

// A cross-encoder (one label, sentence-transformers' Sigmoid): a pair's
// score is the sigmoid of the logit of the tokenizer's pair encoding (token
// types 0 then 1 for RoFormer); an embedder's is the cosine of the two
// embeddings. Errors name the document.
TEST(PairScoring, CrossEncodersAndEmbedders) {
  for (const char* arch : {"modernbert", "roformer"}) {
    SCOPED_TRACE(arch);
    testing::ScratchDir ce, emb;
    MakeEncoderOptions o;
    o.arch = arch;
    o.head = "sequence";
    o.labels = {"relevance"};
    ASSERT_TRUE(MakeEncoderModel(ce.path(), o).ok());
    auto s = LoadEncoderService(ce.path(), "ce");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_TRUE((*s)->scores_pairs());
    EXPECT_STREQ((*s)->task(), "score");
    EXPECT_EQ((*s)->config().score_activation, ScoreActivation::kSigmoid);
    service::EncoderService::ScorePairs pairs;
    pairs.queries = {"where does the owl sleep"};
    pairs.documents = {"the owl sleeps in the oak", "markets open at dawn"};
    auto scored = (*s)->Score(pairs, {});
    ASSERT_TRUE(scored.ok()) << scored.status().ToString();
    service::ScoreOptions raw_options;
    raw_options.raw = true;
    auto raw = (*s)->Score(pairs, raw_options);
    ASSERT_TRUE(raw.ok());
    auto model = LoadSpanModel(ce.path());
    ASSERT_TRUE(model.ok());
    for (std::size_t i = 0; i < 2; ++i) {
      auto enc = (*s)->tokenizer().EncodePair(pairs.queries[0], pairs.documents[i], true, std::nullopt);
      ASSERT_TRUE(enc.ok());
      EXPECT_EQ(enc->type_ids.back(), 1u);
      auto direct = (*model)->ForwardWindows({enc->ids}, {enc->type_ids});
      ASSERT_TRUE(direct.ok());
      // Within the rounding bound, not bit-equal: the service computes on its
      // own thread, this call on the test's, and the GEMMs may split their
      // sums differently by thread (seen once on a CPU without AMX at
      // ROPESERVE_THREADS=1, after other tests had run).
      const EncoderConfig& c = (*model)->config();
      const double direct_score = static_cast<double>((*direct)[0].classes[0]);
      EXPECT_NEAR((*raw)[i].score, direct_score,
                  testing::RoundingBound(std::max(c.intermediate_size, c.hidden_size), c.num_hidden_layers + 4,
                                         std::max(1.0, std::abs(direct_score))));
      EXPECT_NEAR((*scored)[i].score, 1 / (1 + std::exp(-(*raw)[i].score)), 1e-7);
      EXPECT_EQ((*scored)[i].tokens, static_cast<std::int64_t>(enc->ids.size()));
    }
    pairs.documents = {"fine", ""};
    auto bad = (*s)->Score(pairs, {});
    EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(bad.status().param(), "documents[1]");
    pairs.queries = {"a", "b", "c"};
    EXPECT_EQ((*s)->Score(pairs, {}).status().param(), "query");

    o.head = "embedding";
    ASSERT_TRUE(MakeEncoderModel(emb.path(), o).ok());
    auto e = LoadEncoderService(emb.path(), "emb");
    ASSERT_TRUE(e.ok());
    EXPECT_TRUE((*e)->scores_pairs());
    pairs.queries = {"owl"};
    pairs.documents = {"the owl sleeps", "dawn"};
    auto cos = (*e)->Score(pairs, {});
    ASSERT_TRUE(cos.ok()) << cos.status().ToString();
    auto vectors = (*e)->Embed({Input::Text("owl"), Input::Text("the owl sleeps"), Input::Text("dawn")}, {});
    ASSERT_TRUE(vectors.ok());
    for (std::size_t i = 0; i < 2; ++i) {
      double dot = 0;
      for (std::size_t d = 0; d < (*vectors)[0].embedding.size(); ++d)
        dot += static_cast<double>((*vectors)[0].embedding[d]) * (*vectors)[i + 1].embedding[d];
      EXPECT_DOUBLE_EQ((*cos)[i].score, dot);
    }
    // Usage counts the query once.
    EXPECT_EQ((*cos)[0].tokens + (*cos)[1].tokens, (*vectors)[0].tokens + (*vectors)[1].tokens + (*vectors)[2].tokens);
    pairs.queries = {""};
    EXPECT_EQ((*e)->Score(pairs, {}).status().param(), "query");
  }
}

// vLLM's classifier from a causal LM (Qwen3-Reranker with hf_overrides
// architectures Qwen3ForSequenceClassification, classifier_from_token
// [no, yes], is_original_qwen3_reranker): the one label's logit is the LM's
// logit of "yes" minus that of "no" at the pair's last token, and its score
// the sigmoid of that (the probability of "yes" against "no"). Oracle: the
// causal LM itself, loaded as a generator, through the dense reference
// forward. Without is_original, one label per token: their LM logits.
TEST(PairScoring, CausalLmRerankerFromYesNoTokens) {
  testing::ScratchDir lm;
  testing::MakeTinyCheckpoint(lm.path(), testing::TinyOptions("qwen3"));
  auto gen = DecoderModel::Load(lm.path(), DType::kF32);
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();
  auto tokenizer = tok::Tokenizer::FromPath(lm.path());
  ASSERT_TRUE(tokenizer.ok());
  // Two ordinary tokens of this vocabulary stand in for "no" and "yes".
  const TokenId no = 200, yes = 201;
  const std::string no_text = *(*tokenizer)->IdToToken(no), yes_text = *(*tokenizer)->IdToToken(yes);
  auto overlay = ConfigOverlay::Create(lm.path(), {{"architectures", {"Qwen3ForSequenceClassification"}},
                                                   {"classifier_from_token", {no_text, yes_text}},
                                                   {"is_original_qwen3_reranker", true}});
  ASSERT_TRUE(overlay.ok()) << overlay.status().ToString();
  auto s = LoadEncoderService(overlay->path(), "rr");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE((*s)->scores_pairs());
  EXPECT_EQ((*s)->config().labels, std::vector<std::string>{yes_text});
  EXPECT_EQ((*s)->config().score_activation, ScoreActivation::kSigmoid);
  service::EncoderService::ScorePairs pairs;
  pairs.queries = {"<Query>: where does the owl sleep\n"};
  pairs.documents = {"<Document>: the owl sleeps in the oak", "<Document>: markets open at dawn"};
  service::ScoreOptions raw_options;
  raw_options.raw = true;
  auto raw = (*s)->Score(pairs, raw_options);
  auto scored = (*s)->Score(pairs, {});
  ASSERT_TRUE(raw.ok() && scored.ok()) << raw.status().ToString();
  const ModelConfig& c = (*gen)->config();
  for (std::size_t i = 0; i < 2; ++i) {
    auto enc = (*s)->tokenizer().EncodePair(pairs.queries[0], pairs.documents[i], true, std::nullopt);
    ASSERT_TRUE(enc.ok());
    std::vector<std::int64_t> ids(enc->ids.begin(), enc->ids.end());
    const at::Tensor logits = testing::ReferenceForward(**gen, at::tensor(ids, at::kLong));
    const at::Tensor last = logits[static_cast<std::int64_t>(ids.size()) - 1];
    const double expected = last[yes].item<double>() - last[no].item<double>();
    double scale = 1;
    for (TokenId t : {no, yes}) scale = std::max(scale, std::abs(last[t].item<double>()));
    const double bound =
        2 * testing::RoundingBound(
                std::max<std::int64_t>({c.intermediate_size, c.hidden_size, static_cast<std::int64_t>(ids.size())}),
                c.num_hidden_layers + 2, scale);
    EXPECT_NEAR((*raw)[i].score, expected, bound) << "pair " << i;
    EXPECT_NEAR((*scored)[i].score, 1 / (1 + std::exp(-(*raw)[i].score)), 1e-7);
  }
  EXPECT_NE((*raw)[0].score, (*raw)[1].score);
  // Without is_original: a label per token, each its LM logit.
  auto three = ConfigOverlay::Create(lm.path(), {{"architectures", {"Qwen3ForSequenceClassification"}},
                                                 {"classifier_from_token", {no_text, yes_text, no_text}}});
  ASSERT_TRUE(three.ok());
  auto s3 = LoadEncoderService(three->path(), "three");
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  EXPECT_EQ((*s3)->config().num_labels, 3);
  service::ClassifyOptions none;
  none.activation = service::ClassifyOptions::Activation::kNone;
  auto cls = (*s3)->Classify({Input::Text("the owl sleeps")}, none);
  ASSERT_TRUE(cls.ok()) << cls.status().ToString();
  auto enc = (*s3)->tokenizer().Encode("the owl sleeps", true);
  ASSERT_TRUE(enc.ok());
  std::vector<std::int64_t> ids(enc->ids.begin(), enc->ids.end());
  const at::Tensor last =
      testing::ReferenceForward(**gen, at::tensor(ids, at::kLong))[static_cast<std::int64_t>(ids.size()) - 1];
  double scale = 1;
  for (TokenId t : {no, yes}) scale = std::max(scale, std::abs(last[t].item<double>()));
  const double bound = testing::RoundingBound(
      std::max<std::int64_t>({c.intermediate_size, c.hidden_size, static_cast<std::int64_t>(ids.size())}),
      c.num_hidden_layers + 2, scale);
  ASSERT_EQ((*cls)[0].scores.size(), 3u);
  EXPECT_NEAR((*cls)[0].scores[0], last[no].item<double>(), bound);
  EXPECT_NEAR((*cls)[0].scores[1], last[yes].item<double>(), bound);
  // The third label is the first's token again: the same logit within the
  // bound (not bit-equal: a GEMM may round its output columns differently,
  // e.g. oneDNN on a CPU without AMX).
  EXPECT_NEAR((*cls)[0].scores[2], last[no].item<double>(), bound);
  // A token the vocabulary lacks, and is_original with other than two tokens, are refused.
  auto missing = ConfigOverlay::Create(lm.path(), {{"architectures", {"Qwen3ForSequenceClassification"}},
                                                   {"classifier_from_token", {"no-such-token-here", yes_text}}});
  ASSERT_TRUE(missing.ok());
  auto bad = LoadEncoderService(missing->path(), "bad");
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("no-such-token-here"), std::string::npos) << bad.status().ToString();
  auto odd = ConfigOverlay::Create(lm.path(), {{"architectures", {"Qwen3ForSequenceClassification"}},
                                               {"classifier_from_token", {no_text, yes_text, no_text}},
                                               {"is_original_qwen3_reranker", true}});
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(LoadEncoderService(odd->path(), "odd").status().code(), ErrorCode::kInvalidArgument);
}

TEST(ClassifierLoad, HeadsTheEncoderServiceDoesNotServeAreRefused) {
  testing::ScratchDir qa;
  ASSERT_TRUE(MakeEncoderModel(qa.path(), MakeEncoderOptions{}).ok());
  auto span = LoadEncoderService(qa.path(), "qa");
  EXPECT_EQ(span.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(span.status().message().find("--qa"), std::string::npos) << span.status().ToString();
  MakeEncoderOptions o;
  o.labels = {"O", "B-PER"};
  // A decoder classifier neither generates nor pools as a trunk.
  testing::ScratchDir cls;
  o.head = "sequence";
  o.arch = "qwen2";
  ASSERT_TRUE(MakeEncoderModel(cls.path(), o).ok());
  auto lm = DecoderModel::Load(cls.path(), DType::kF32);
  EXPECT_EQ(lm.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(lm.status().message().find("--encoder"), std::string::npos) << lm.status().ToString();
  EXPECT_EQ(DecoderModel::LoadTrunk(cls.path(), DType::kF32).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(LoadQaService(cls.path(), "qa").status().code(), ErrorCode::kInvalidArgument);
  // MakeEncoderModel refuses a decoder token classifier.
  o.head = "token";
  EXPECT_EQ(MakeEncoderModel(cls.path(), o).code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace ropeserve
