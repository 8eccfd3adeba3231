// `retrieve` on POST /v1/qa (AnswerQuestions): an encoder ranks a
// question's passages and the QA model reads only the best. The planted
// case: a ModernBERT embedder whose layers are zeroed (each token's state
// is then its normalized embedding, so mean pooling is a bag of words and
// the cosine measures shared tokens), 49 passages sharing no word with the
// question and one that holds the question's words and its answer. The
// retriever must rank that passage first, and every answer must come from
// it carrying both scores (the span's and the retrieval's), with its index
// in the request.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>

#include "server/api/rest/rest_handlers.h"
#include "server/api/rest/rest_request.h"
#include "server/checkpoint/model_generator.h"
#include "server/checkpoint/safetensors.h"
#include "server/serving/service_factory.h"
#include "tests/common/scratch_dir.h"

namespace ropeserve {
namespace {

using json = nlohmann::json;

// A generated ModernBertModel embedder with every layer's weights zeroed.
void MakeLexicalEmbedder(const std::string& dir) {
  MakeEncoderOptions o;
  o.head = "embedding";
  o.pooling = "mean";
  o.seed = 11;
  ASSERT_TRUE(MakeEncoderModel(dir, o).ok());
  auto file = SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, info] : (*file)->tensors()) {
    const std::uint8_t* data = (*file)->Data(info);
    std::vector<std::uint8_t> bytes(data, data + (info.end - info.begin));
    if (name.rfind("layers.", 0) == 0) std::fill(bytes.begin(), bytes.end(), 0);
    tensors.push_back({name, info.dtype, info.shape, std::move(bytes)});
  }
  file->reset();
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}}).ok());
}

class QaRetrieve : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(MakeEncoderModel(qa_dir_.path(), MakeEncoderOptions{}).ok());
    auto qa = LoadQaService(qa_dir_.path(), "qa");
    ASSERT_TRUE(qa.ok()) << qa.status().ToString();
    qa_ = std::move(*qa);
    MakeLexicalEmbedder(embed_dir_.path());
    auto e = LoadEncoderService(embed_dir_.path(), "lexical");
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    embedder_ = std::move(*e);
  }
  StatusOr<json> Ask(const json& body, std::vector<service::EncoderService*> encoders) {
    RS_ASSIGN_OR_RETURN(api::RestReply reply, api::AnswerQuestions(*qa_, api::RestRequest{body.dump()}, encoders));
    return json::parse(reply.body);
  }
  testing::ScratchDir qa_dir_, embed_dir_;
  std::unique_ptr<service::QaService> qa_;
  std::unique_ptr<service::EncoderService> embedder_;
};

TEST_F(QaRetrieve, PicksThePlantedPassageFromFifty) {
  const char* words[] = {"market", "river", "stone", "cloud", "bread", "train", "piano", "glass", "field", "paper"};
  json contexts = json::array();
  const int planted = 37;
  for (int i = 0; i < 50; ++i) {
    if (i == planted) {
      contexts.push_back({{"id", "owl"}, {"text", "The grey owl sleeps in the old oak tree near Millbrook."}});
      continue;
    }
    std::string text;
    for (int w = 0; w < 8; ++w) text += std::string(words[(i * 7 + w * 3) % 10]) + (w < 7 ? " " : ".");
    contexts.push_back(text);
  }
  const json body = {{"question", "Where does the grey owl sleep?"},
                     {"contexts", contexts},
                     {"top_k", 3},
                     {"retrieve", {{"top_k", 1}}}};
  auto out = Ask(body, {embedder_.get()});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)["retrieval_model"], "lexical");
  ASSERT_EQ((*out)["retrieved"].size(), 1u) << out->dump();
  EXPECT_EQ((*out)["retrieved"][0]["passage"], planted);
  EXPECT_EQ((*out)["retrieved"][0]["passage_id"], "owl");
  const double retrieval = (*out)["retrieved"][0]["score"];
  ASSERT_FALSE((*out)["answers"].empty());
  for (const json& a : (*out)["answers"]) {
    EXPECT_EQ(a["passage"], planted) << a.dump();
    EXPECT_EQ(a["retrieval_score"], retrieval);
    EXPECT_TRUE(a["score"].is_number());
    // The span is a substring of the planted passage at its offsets.
    const std::string text = contexts[planted]["text"];
    EXPECT_EQ(text.substr(a["start"].get<std::size_t>(), a["end"].get<std::size_t>() - a["start"].get<std::size_t>()),
              a["answer"].get<std::string>());
  }
  EXPECT_GT((*out)["usage"]["retrieval_tokens"].get<std::int64_t>(), 50);
  // The planted passage's score stands clear of the best distractor's.
  json all = body;
  all["retrieve"]["top_k"] = 50;
  auto ranked = Ask(all, {embedder_.get()});
  ASSERT_TRUE(ranked.ok());
  ASSERT_EQ((*ranked)["retrieved"].size(), 50u);
  EXPECT_EQ((*ranked)["retrieved"][0]["passage"], planted);
  EXPECT_GT((*ranked)["retrieved"][0]["score"].get<double>(), (*ranked)["retrieved"][1]["score"].get<double>() + 0.1)
      << (*ranked)["retrieved"].dump();
}

TEST_F(QaRetrieve, BadRetrievalRequestsAreClearErrors) {
  const json two = {{"question", "q?"}, {"contexts", {"a b", "c d"}}};
  auto code = [&](json body, std::vector<service::EncoderService*> encoders, const std::string& param) {
    auto out = Ask(body, encoders);
    EXPECT_FALSE(out.ok()) << body.dump();
    if (!out.ok()) {
      EXPECT_EQ(out.status().param(), param) << out.status().ToString();
    }
    return out.ok() ? ErrorCode::kOk : out.status().code();
  };
  json b = two;
  b["retrieve"] = {{"top_k", 0}};
  EXPECT_EQ(code(b, {embedder_.get()}, "retrieve.top_k"), ErrorCode::kMalformedRequest);
  b["retrieve"] = {{"top_n", 1}};
  EXPECT_EQ(code(b, {embedder_.get()}, "retrieve.top_n"), ErrorCode::kMalformedRequest);
  b["retrieve"] = {{"model", "nope"}};
  EXPECT_EQ(code(b, {embedder_.get()}, "retrieve.model"), ErrorCode::kNotFound);
  b["retrieve"] = json::object();
  EXPECT_EQ(code(b, {}, ""), ErrorCode::kUnimplemented);  // no encoder served
  json one = {{"question", "q?"}, {"context", "a b"}, {"retrieve", json::object()}};
  EXPECT_EQ(code(one, {embedder_.get()}, "contexts"), ErrorCode::kMalformedRequest);
  // Without retrieve, nothing changes: every passage is read, no retrieval fields.
  auto plain = Ask(two, {embedder_.get()});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->contains("retrieved"));
  EXPECT_FALSE(plain->contains("retrieval_model"));
}

}  // namespace
}  // namespace ropeserve
