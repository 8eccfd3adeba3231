// service::EncoderService on tiny random base encoders (ModernBertModel,
// RoFormerModel) written by the generator with sentence-transformers
// metadata: embeddings equal the reference path's hidden state pooled in
// float64 within the rounding bound, an input's embedding is bitwise the
// same alone, batched and inside an engine's steps, prompts, token-id
// inputs, truncation and `dimensions` behave as sentence-transformers and
// the OpenAI API say, base models load with or without the family's
// tensor prefix, and bad input or metadata is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

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

service::EncoderInput Text(std::string s) { return service::EncoderInput::Text(std::move(s)); }

const char* kLong =
    "the fox jumps over the dog near the river bank, and the owl sleeps in the old oak tree while the rain falls "
    "on the hills beyond the town where the market opens at dawn";

class Embedding : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    MakeEncoderOptions o;
    o.seed = 5;
    o.arch = GetParam();
    o.head = "embedding";
    o.max_position_embeddings = 128;
    ASSERT_TRUE(MakeEncoderModel(dir_.path(), o).ok());
    auto s = LoadEncoderService(dir_.path(), "embed");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    service_ = std::move(*s);
  }
  std::vector<float> One(const service::EncoderInput& in, const service::EmbedOptions& o = {}) {
    auto r = service_->Embed({in}, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)[0].embedding : std::vector<float>();
  }
  bool decoder() const { return service_->config().family == EncoderFamily::kDecoder; }
  // The reference path's last hidden state: the encoders' own (Hugging
  // Face's eager modules), the tests' dense oracle for the decoder trunks.
  StatusOr<SpanLogits> Reference(const std::vector<TokenId>& ids) const {
    if (!decoder()) {
      RS_ASSIGN_OR_RETURN(auto model, LoadSpanModel(dir_.path()));
      return model->ForwardReference(ids, {}, true);
    }
    RS_ASSIGN_OR_RETURN(auto trunk, DecoderModel::LoadTrunk(dir_.path(), DType::kF32));
    return testing::ReferenceSpanWindow(*trunk, ids, true);
  }
  testing::ScratchDir dir_;
  std::unique_ptr<service::EncoderService> service_;
};

TEST_P(Embedding, MetadataAndConfigAreRead) {
  EXPECT_EQ(service_->config().head, EncoderHead::kNone);
  // make-model's auto pooling: what sentence-transformers models of the kind use.
  EXPECT_EQ(service_->pooling().pooling, decoder() ? embedding::Pooling::kLastToken : embedding::Pooling::kMean);
  EXPECT_TRUE(service_->pooling().normalize);
  EXPECT_EQ(service_->pooling().source, "sentence-transformers");
  EXPECT_EQ(service_->pooling().prompts.at("query"), "search_query: ");
  EXPECT_EQ(service_->max_input_tokens(), 128);
  EXPECT_EQ(service_->dimensions(), 64);
}

// The serving path's pooled hidden state (mean for encoders, last token
// for decoders) against the reference path's (Hugging Face's eager
// computation) pooled in float64.
TEST_P(Embedding, EqualsTheReferenceHiddenStatePooled) {
  service::EmbedOptions raw;
  raw.normalize = false;
  for (const std::string text : {"a", "the fox jumps", kLong}) {
    auto enc = service_->tokenizer().Encode(text, true);
    ASSERT_TRUE(enc.ok());
    auto ref = Reference(enc->ids);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    const auto len = static_cast<std::int64_t>(enc->ids.size());
    const std::int64_t dim = service_->dimensions();
    ASSERT_EQ(static_cast<std::int64_t>(ref->hidden.size()), len * dim);
    std::vector<double> expected(static_cast<std::size_t>(dim), 0.0);
    double max_abs = 0;
    for (std::int64_t t = 0; t < len; ++t)
      for (std::int64_t d = 0; d < dim; ++d) {
        const double v = ref->hidden[static_cast<std::size_t>(t * dim + d)];
        if (!decoder()) expected[static_cast<std::size_t>(d)] += v / static_cast<double>(len);
        if (decoder() && t == len - 1) expected[static_cast<std::size_t>(d)] = v;
        max_abs = std::max(max_abs, std::abs(v));
      }
    const std::vector<float> got = One(Text(text), raw);
    ASSERT_EQ(got.size(), expected.size());
    double max_diff = 0;
    for (std::size_t d = 0; d < got.size(); ++d) max_diff = std::max(max_diff, std::abs(got[d] - expected[d]));
    const EncoderConfig& c = service_->config();
    // Each token's hidden state is within the network's rounding bound of
    // the reference's; their mean too, plus the final rounding to float32.
    const double bound =
        testing::RoundingBound(std::max({c.hidden_size, c.intermediate_size, len}), c.num_hidden_layers, max_abs) +
        max_abs * testing::kF32Roundoff;
    EXPECT_LE(max_diff, bound) << text << ": largest |hidden| " << max_abs;
    EXPECT_GT(max_abs, 0.1);  // not degenerate
    // Normalized (the default): unit length, the same direction.
    const std::vector<float> unit = One(Text(text));
    double norm = 0, raw_norm = 0;
    for (float x : unit) norm += static_cast<double>(x) * x;
    for (float x : got) raw_norm += static_cast<double>(x) * x;
    EXPECT_NEAR(std::sqrt(norm), 1.0, static_cast<double>(dim) * testing::kF32Roundoff);
    for (std::size_t d = 0; d < got.size(); ++d)
      EXPECT_NEAR(unit[d], got[d] / std::sqrt(raw_norm), 4 * testing::kF32Roundoff);
  }
}

TEST_P(Embedding, AnInputsEmbeddingDoesNotDependOnItsBatch) {
  const std::vector<float> alone = One(Text("the owl sleeps"));
  auto batch = service_->Embed({Text(kLong), Text("the owl sleeps"), Text("x"), Text("the owl sleeps")}, {});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ((*batch)[1].embedding, alone);
  EXPECT_EQ((*batch)[3].embedding, alone);
  EXPECT_NE((*batch)[0].embedding, alone);
  // Inside an engine's steps, beside a decode, with a budget that splits the batch.
  testing::DecodingEngine running(16);
  service::EncoderServiceOptions eo;
  eo.engine = &running.engine();
  auto in_engine = LoadEncoderService(dir_.path(), "embed", eo);
  ASSERT_TRUE(in_engine.ok());
  auto stepped = (*in_engine)->Embed({Text(kLong), Text("the owl sleeps")}, {});
  ASSERT_TRUE(stepped.ok()) << stepped.status().ToString();
  EXPECT_EQ((*stepped)[1].embedding, alone);
  EXPECT_EQ((*stepped)[0].embedding, (*batch)[0].embedding);
  EXPECT_GT(running.engine().stats().encoder_tokens.load(), 0u);
  running.FinishDecode();
  running.engine().Stop();
  EXPECT_EQ((*in_engine)->Embed({Text("x")}, {}).status().code(), ErrorCode::kUnavailable);
}

TEST_P(Embedding, PromptsTokenIdsAndDimensions) {
  // A named prompt is prepended to the text (include_prompt: pooled too).
  service::EmbedOptions query;
  query.prompt_name = "query";
  EXPECT_EQ(One(Text("the fox"), query), One(Text("search_query: the fox")));
  query.prompt_name = "nope";
  auto bad = service_->Embed({Text("the fox")}, query);
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.status().param(), "prompt_name");
  // Token ids are used as they are.
  auto enc = service_->tokenizer().Encode("the fox", true);
  ASSERT_TRUE(enc.ok());
  auto by_ids = service_->Embed({service::EncoderInput::Ids(enc->ids), Text("the fox")}, {});
  ASSERT_TRUE(by_ids.ok());
  EXPECT_EQ((*by_ids)[0].embedding, (*by_ids)[1].embedding);
  EXPECT_EQ((*by_ids)[0].tokens, static_cast<std::int64_t>(enc->ids.size()));
  // dimensions: the first N values of the raw embedding, normalized.
  service::EmbedOptions raw, cut;
  raw.normalize = false;
  cut.dimensions = 16;
  const std::vector<float> full = One(Text("the fox"), raw), part = One(Text("the fox"), cut);
  ASSERT_EQ(part.size(), 16u);
  double norm = 0;
  for (int d = 0; d < 16; ++d) norm += static_cast<double>(full[d]) * full[d];
  for (int d = 0; d < 16; ++d) EXPECT_NEAR(part[d], full[d] / std::sqrt(norm), 4 * testing::kF32Roundoff);
}

TEST_P(Embedding, LongInputsAreRefusedOrTruncatedAsAsked) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "word" + std::to_string(i) + " ";
  auto refused = service_->Embed({Text("short"), Text(text)}, {});
  EXPECT_EQ(refused.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(refused.status().param(), "input[1]");
  service::EmbedOptions right, left;
  right.truncate = left.truncate = true;
  left.truncate_left = true;
  auto r = service_->Embed({Text(text)}, right), l = service_->Embed({Text(text)}, left);
  ASSERT_TRUE(r.ok() && l.ok()) << r.status().ToString() << l.status().ToString();
  EXPECT_EQ((*r)[0].tokens, 128);
  EXPECT_EQ((*l)[0].tokens, 128);
  EXPECT_NE((*r)[0].embedding, (*l)[0].embedding);
  // Cutting keeps the special tokens: the first 126 text tokens between them.
  auto all = service_->tokenizer().Encode(text, true);
  ASSERT_TRUE(all.ok());
  std::vector<TokenId> kept(all->ids.begin(), all->ids.begin() + 127);
  kept.push_back(all->ids.back());
  auto same = service_->Embed({service::EncoderInput::Ids(kept)}, {});
  ASSERT_TRUE(same.ok());
  EXPECT_EQ((*same)[0].embedding, (*r)[0].embedding);
}

TEST_P(Embedding, BadInputIsAClearError) {
  auto code = [&](std::vector<service::EncoderInput> in, service::EmbedOptions o = {}) {
    return service_->Embed(in, o).status().code();
  };
  EXPECT_EQ(code({}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({Text("")}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({service::EncoderInput::Ids({})}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({service::EncoderInput::Ids({1, 100000})}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({Text("a\xff")}), ErrorCode::kInvalidArgument);  // invalid UTF-8
  service::EmbedOptions o;
  o.dimensions = 65;
  EXPECT_EQ(code({Text("a")}, o), ErrorCode::kInvalidArgument);
  o.dimensions = 0;
  EXPECT_EQ(code({Text("a")}, o), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(std::vector<service::EncoderInput>(2049, Text("a"))), ErrorCode::kInvalidArgument);
  // The service still answers.
  EXPECT_EQ(One(Text("a")).size(), 64u);
}

// Hugging Face saves a base model without the family's prefix (what the
// generator writes); one cut from a model with a head keeps it. Both load,
// to the same weights.
TEST_P(Embedding, LoadsWithOrWithoutTheFamilyPrefix) {
  const std::string prefix = GetParam() == std::string("roformer") ? "roformer." : "model.";  // decoders: "model." too
  auto file = SafetensorsFile::Open(dir_ / "model.safetensors");
  ASSERT_TRUE(file.ok());
  std::vector<TensorToWrite> renamed;
  for (const auto& [name, info] : (*file)->tensors()) {
    ASSERT_NE(name.rfind(prefix, 0), 0u) << name;  // the generator's names are the base model's
    const std::uint8_t* data = (*file)->Data(info);
    renamed.push_back(
        {prefix + name, info.dtype, info.shape, std::vector<std::uint8_t>(data, data + (info.end - info.begin))});
  }
  file->reset();
  ASSERT_TRUE(WriteSafetensors(dir_ / "model.safetensors", renamed, {{"format", "pt"}}).ok());
  auto prefixed = LoadEncoderService(dir_.path(), "embed");
  ASSERT_TRUE(prefixed.ok()) << prefixed.status().ToString();
  auto a = (*prefixed)->Embed({Text("the fox")}, {});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)[0].embedding, One(Text("the fox")));
}

INSTANTIATE_TEST_SUITE_P(Families, Embedding, ::testing::Values("modernbert", "roformer", "qwen3", "llama"));

TEST(EmbeddingLoad, ModelsAndMetadataTheServiceCannotServeAreRefused) {
  testing::ScratchDir qa, embed;
  ASSERT_TRUE(MakeEncoderModel(qa.path(), MakeEncoderOptions{}).ok());
  auto with_head = LoadEncoderService(qa.path(), "e");
  EXPECT_EQ(with_head.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(with_head.status().message().find("has a head"), std::string::npos) << with_head.status().ToString();
  MakeEncoderOptions o;
  o.head = "embedding";
  o.pooling = "cls";
  ASSERT_TRUE(MakeEncoderModel(embed.path(), o).ok());
  EXPECT_EQ(LoadQaService(embed.path(), "qa").status().code(), ErrorCode::kInvalidArgument);
  auto cls = LoadEncoderService(embed.path(), "e");
  ASSERT_TRUE(cls.ok());
  EXPECT_EQ((*cls)->pooling().pooling, embedding::Pooling::kCls);
  // A Dense module after the pooling: not computed, so refused by name.
  std::ofstream(embed / "modules.json")
      << R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
            {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
            {"idx":2,"name":"2","path":"2_Dense","type":"sentence_transformers.models.Dense"}])";
  auto dense = LoadEncoderService(embed.path(), "e");
  EXPECT_EQ(dense.status().code(), ErrorCode::kUnimplemented);
  EXPECT_NE(dense.status().message().find("Dense"), std::string::npos) << dense.status().ToString();
}

// A causal LM serves as a sentence embedder (as Qwen3-Embedding, which
// declares Qwen3ForCausalLM): its trunk, lm_head ignored, the last token
// pooled without sentence-transformers' files. A base decoder cannot
// generate, and neither can answer questions.
TEST(EmbeddingLoad, DecoderTrunksFromCausalLmsAndBaseModels) {
  testing::ScratchDir lm, base;
  ASSERT_TRUE(MakeModel(lm.path(), MakeModelOptions{}).ok());
  auto from_lm = LoadEncoderService(lm.path(), "lm");
  ASSERT_TRUE(from_lm.ok()) << from_lm.status().ToString();
  EXPECT_EQ((*from_lm)->pooling().pooling, embedding::Pooling::kLastToken);
  EXPECT_EQ((*from_lm)->pooling().source, "default");
  auto v = (*from_lm)->Embed({Text("the fox")}, {});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(static_cast<std::int64_t>((*v)[0].embedding.size()), (*from_lm)->dimensions());
  EXPECT_EQ(LoadQaService(lm.path(), "qa").status().code(), ErrorCode::kInvalidArgument);
  MakeEncoderOptions o;
  o.head = "embedding";
  o.arch = "qwen3";
  ASSERT_TRUE(MakeEncoderModel(base.path(), o).ok());
  auto generate = DecoderModel::Load(base.path(), DType::kF32);
  EXPECT_EQ(generate.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(generate.status().message().find("--encoder"), std::string::npos) << generate.status().ToString();
}

}  // namespace
}  // namespace ropeserve
