// The gRPC API through a real channel on loopback.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "proto/ropeserve/v1/ropeserve.grpc.pb.h"
#include "server/api/grpc/grpc_calls.h"
#include "server/api/grpc/grpc_service.h"
#include "server/api/serving_context.h"
#include "server/models/decoder.h"
#include "server/service/generation_service.h"
#include "server/tokenizer/tokenizer.h"
#include "tests/api/tiny_service_test.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/common/offline.h"

namespace ropeserve {
namespace {

class GrpcApi : public TinyServiceTest {
 protected:
  void SetUp() override {
    StartService("qwen3");
    if (HasFatalFailure()) return;
    server_ = std::make_unique<api::GrpcServer>(ctx_);
    api::GrpcServerOptions go;
    go.host = "127.0.0.1";
    go.port = 0;
    Status s = server_->Start(go);
    ASSERT_TRUE(s.ok()) << s.ToString();
    stub_ = v1::Inference::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Stop();
  }

  // Reads a Generate stream to its end, merged into one message.
  grpc::Status Call(const v1::GenerateRequest& req, v1::GenerateResponse* resp, int* messages = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto reader = stub_->Generate(&ctx, req);
    v1::GenerateResponse m;
    resp->Clear();
    int n = 0;
    while (reader->Read(&m)) {
      ++n;
      const std::string text = resp->text() + m.text();
      resp->MergeFrom(m);  // appends the repeated fields, overwrites the rest
      resp->set_text(text);
    }
    if (messages != nullptr) *messages = n;
    return reader->Finish();
  }

  std::unique_ptr<api::GrpcServer> server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

TEST_F(GrpcApi, ModelInfo) {
  grpc::ClientContext c2;
  v1::GetModelInfoResponse models;
  ASSERT_TRUE(stub_->GetModelInfo(&c2, v1::GetModelInfoRequest(), &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.block_size(), 16);
  EXPECT_GT(models.num_kv_blocks(), 0);
  EXPECT_EQ(models.models(0).architecture(), "Qwen3ForCausalLM");
  EXPECT_EQ(models.models(0).vocab_size(), 300);
}

TEST_F(GrpcApi, GreedyGenerateEqualsOfflineGenerate) {
  v1::GenerateRequest req;
  for (int id : {9, 8, 7}) req.add_prompt_ids(id);
  req.set_max_tokens(5);
  req.set_ignore_eos(true);
  req.set_top_logprobs(3);
  v1::GenerateResponse resp;
  grpc::Status st = Call(req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  service::GenerationFields o;
  o.max_tokens = 5;
  o.ignore_eos = true;
  auto want = testing::OfflineGenerate(*model_, {9, 8, 7}, o);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(std::vector<std::int64_t>(resp.token_ids().begin(), resp.token_ids().end()), want->generated_ids);
  ASSERT_EQ(resp.top_logprobs_size(), 5);
  EXPECT_EQ(resp.top_logprobs(0).tokens_size(), 3);
  EXPECT_EQ(resp.usage().prompt_tokens(), 3);
  EXPECT_EQ(resp.finish_reason(), "length");
}

TEST_F(GrpcApi, LogitBiasForcesAndItsRangeIsChecked) {
  v1::GenerateRequest req;
  for (int id : {9, 8, 7}) req.add_prompt_ids(id);
  req.set_max_tokens(3);
  req.set_ignore_eos(true);
  (*req.mutable_sampling()->mutable_logit_bias())[11] = 100;
  v1::GenerateResponse resp;
  grpc::Status st = Call(req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(std::vector<std::int64_t>(resp.token_ids().begin(), resp.token_ids().end()),
            (std::vector<std::int64_t>{11, 11, 11}));
  (*req.mutable_sampling()->mutable_logit_bias())[11] = 101;
  EXPECT_EQ(Call(req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// OutputConstraint has REST's limits: a regex of at most 4096 bytes, at
// most 1024 choices (the one validator's, before any model work).
TEST_F(GrpcApi, ConstraintLimitsAreRestLimits) {
  v1::GenerateRequest req;
  req.add_prompt_ids(9);
  req.mutable_constraint()->set_regex(std::string(4097, 'a'));
  v1::GenerateResponse resp;
  EXPECT_EQ(Call(req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req.mutable_constraint()->mutable_choice();
  for (int i = 0; i < 1025; ++i) req.mutable_constraint()->mutable_choice()->add_values("x");
  EXPECT_EQ(Call(req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(GrpcApi, ErrorsMapToStatusCodes) {
  v1::GenerateResponse resp;
  v1::GenerateRequest empty;
  EXPECT_EQ(Call(empty, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest wrong_model;
  wrong_model.add_prompt_ids(1);
  wrong_model.set_model("other");
  EXPECT_EQ(Call(wrong_model, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::GenerateRequest out_of_vocab;
  out_of_vocab.add_prompt_ids(300);
  grpc::Status st = Call(out_of_vocab, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("outside the vocabulary"), std::string::npos);
  v1::GenerateRequest bad_sampling;
  bad_sampling.add_prompt_ids(1);
  bad_sampling.mutable_sampling()->set_min_p(3);
  EXPECT_EQ(Call(bad_sampling, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest both;
  both.add_prompt_ids(1);
  both.set_prompt("hi");
  EXPECT_EQ(Call(both, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// google.rpc details (AIP-193) in grpc-status-details-bin.
TEST(GrpcErrors, CarryGoogleRpcDetails) {
  auto details = [](const grpc::Status& st) {
    google::rpc::Status out;
    EXPECT_TRUE(out.ParseFromString(st.error_details()));
    EXPECT_EQ(out.code(), static_cast<int>(st.error_code()));
    EXPECT_EQ(out.message(), st.error_message());
    return out;
  };
  const grpc::Status bad =
      api::ToGrpc(InvalidArgument("too long").WithParam("max_tokens").WithReason("context_length_exceeded"));
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  google::rpc::Status s = details(bad);
  ASSERT_EQ(s.details_size(), 2);
  google::rpc::ErrorInfo info;
  ASSERT_TRUE(s.details(0).UnpackTo(&info));
  EXPECT_EQ(info.reason(), "context_length_exceeded");
  google::rpc::BadRequest br;
  ASSERT_TRUE(s.details(1).UnpackTo(&br));
  ASSERT_EQ(br.field_violations_size(), 1);
  EXPECT_EQ(br.field_violations(0).field(), "max_tokens");
  // Overload: RetryInfo with REST's Retry-After.
  const grpc::Status busy = api::ToGrpc(Status(ErrorCode::kResourceExhausted, "queue full"));
  EXPECT_EQ(busy.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  s = details(busy);
  google::rpc::RetryInfo retry;
  bool found = false;
  for (const auto& any : s.details())
    if (any.UnpackTo(&retry)) found = true;
  ASSERT_TRUE(found);
  EXPECT_EQ(retry.retry_delay().seconds(), 1);
  // No field, no reason: no BadRequest, no ErrorInfo.
  EXPECT_EQ(details(api::ToGrpc(Internal("x"))).details_size(), 0);
}

TEST_F(GrpcApi, TextPromptStopStringsAndDecodedText) {
  v1::GenerateRequest req;
  req.set_prompt("Hello there");
  req.set_max_tokens(10);
  req.set_ignore_eos(true);
  v1::GenerateResponse resp;
  ASSERT_TRUE(Call(req, &resp).ok());
  const auto ids = tokenizer_->Encode("Hello there", true)->ids;
  EXPECT_EQ(resp.usage().prompt_tokens(), static_cast<std::int64_t>(ids.size()));
  std::vector<TokenId> out(resp.token_ids().begin(), resp.token_ids().end());
  EXPECT_EQ(resp.text(), *tokenizer_->Decode(out, true));
  ASSERT_GE(resp.text().size(), 4u);
  v1::GenerateRequest stopping = req;
  stopping.add_stop(resp.text().substr(2, 2));
  v1::GenerateResponse cut;
  ASSERT_TRUE(Call(stopping, &cut).ok());
  EXPECT_EQ(cut.finish_reason(), "stop");
  EXPECT_EQ(cut.text(), resp.text().substr(0, resp.text().find(resp.text().substr(2, 2))));
  stopping.set_include_stop_str_in_output(true);
  ASSERT_TRUE(Call(stopping, &cut).ok());
  EXPECT_EQ(cut.finish_reason(), "stop");
  EXPECT_EQ(cut.text(), resp.text().substr(0, resp.text().find(resp.text().substr(2, 2)) + 2));
}

// SamplingParams' allowed_token_ids and bad_words reach the engine; their
// limits are the one validator's.
TEST_F(GrpcApi, AllowedTokenIdsAndBadWords) {
  v1::GenerateRequest req;
  for (int id : {9, 8, 7}) req.add_prompt_ids(id);
  req.set_max_tokens(6);
  req.set_ignore_eos(true);
  v1::GenerateResponse free_run;
  ASSERT_TRUE(Call(req, &free_run).ok());
  const std::int64_t first = free_run.token_ids(0);
  v1::GenerateRequest allowed = req;
  for (std::int64_t id : {first + 1 < 300 ? first + 1 : first - 1, std::int64_t{42}})
    allowed.mutable_sampling()->add_allowed_token_ids(id);
  v1::GenerateResponse resp;
  ASSERT_TRUE(Call(allowed, &resp).ok());
  for (std::int64_t id : resp.token_ids()) EXPECT_TRUE(id == allowed.sampling().allowed_token_ids(0) || id == 42) << id;
  allowed.mutable_sampling()->add_allowed_token_ids(300);
  EXPECT_EQ(Call(allowed, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // The greedy first token, as a word, is never generated.
  v1::GenerateRequest bad = req;
  const std::string word = *tokenizer_->Decode(std::vector<TokenId>{static_cast<TokenId>(first)}, true);
  ASSERT_FALSE(word.empty());
  bad.mutable_sampling()->add_bad_words(word);
  ASSERT_TRUE(Call(bad, &resp).ok());
  EXPECT_NE(resp.token_ids(0), first);
  bad.mutable_sampling()->add_bad_words(" ");
  EXPECT_EQ(Call(bad, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace ropeserve
