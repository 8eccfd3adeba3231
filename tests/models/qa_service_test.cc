// service::QaService on a tiny span model: its own worker (no engine) and inside an
// engine's steps (a fake decoder), batch == one by one, bad input, and a
// stopped engine failing QA calls instead of leaving them waiting.
#include <gtest/gtest.h>

#include "server/checkpoint/model_generator.h"
#include "server/engine/engine.h"
#include "server/serving/service_factory.h"
#include "tests/checkpoint/test_checkpoints.h"
#include "tests/engine/decoding_engine.h"

namespace ropeserve {
namespace {

service::QaRequest Request(std::string question, std::string context) {
  service::QaRequest r;
  r.question = std::move(question);
  r.context = std::move(context);
  r.windows.max_seq_len = 32;
  r.windows.doc_stride = 8;
  r.options.top_k = 2;
  return r;
}

class QaServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(MakeEncoderModel(dir_.path(), MakeEncoderOptions{}).ok()); }
  testing::ScratchDir dir_;
  const std::string context_ = "the fox jumps over the dog near the river bank, and the owl sleeps in the old oak tree";
};

TEST_F(QaServiceTest, OwnWorkerAnswersAndBatchesEqualSingles) {
  auto service = LoadQaService(dir_.path(), "qa");
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  std::vector<service::QaRequest> requests = {Request("where", context_), Request("who sleeps", context_),
                                              Request("what jumps", context_.substr(0, 30))};
  auto batch = (*service)->AnswerBatch(requests);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->size(), 3u);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto one = (*service)->Answer(requests[i]);
    ASSERT_TRUE(one.ok());
    EXPECT_GT(one->windows, 0);
    ASSERT_EQ(one->answers.size(), (*batch)[i].answers.size());
    for (std::size_t a = 0; a < one->answers.size(); ++a) {
      EXPECT_EQ(one->answers[a].text, (*batch)[i].answers[a].text);
      // Bitwise: a window's logits do not depend on what it was batched with.
      EXPECT_EQ(one->answers[a].score, (*batch)[i].answers[a].score);
      EXPECT_EQ(one->answers[a].start, (*batch)[i].answers[a].start);
      EXPECT_EQ(one->answers[a].end, (*batch)[i].answers[a].end);
      const auto& ans = one->answers[a];
      EXPECT_EQ(requests[i].context.substr(static_cast<std::size_t>(ans.start),
                                           static_cast<std::size_t>(ans.end - ans.start)),
                ans.text);
    }
  }
  EXPECT_GT((*batch)[0].windows, 1);  // the context needed several windows
  // And in other compositions: the same request after others, twice in one batch.
  auto again = (*service)->AnswerBatch({requests[2], requests[1], requests[0], requests[0]});
  ASSERT_TRUE(again.ok());
  for (const service::QaResult* r : {&(*again)[2], &(*again)[3]}) {
    ASSERT_EQ(r->answers.size(), (*batch)[0].answers.size());
    for (std::size_t a = 0; a < r->answers.size(); ++a) {
      EXPECT_EQ(r->answers[a].score, (*batch)[0].answers[a].score);
      EXPECT_EQ(r->answers[a].text, (*batch)[0].answers[a].text);
    }
  }
}

TEST_F(QaServiceTest, BadInputIsAClearError) {
  service::QaServiceOptions o;
  o.max_context_bytes = 40;
  auto service = LoadQaService(dir_.path(), "qa", o);
  ASSERT_TRUE(service.ok());
  EXPECT_EQ((*service)->Answer(Request("", context_.substr(0, 20))).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ((*service)->Answer(Request("q", "")).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ((*service)->Answer(Request("q", context_)).status().code(), ErrorCode::kInvalidArgument);  // > 40 bytes
  service::QaRequest too_long = Request("q", "short context");
  too_long.windows.max_seq_len = 100000;
  EXPECT_EQ((*service)->Answer(too_long).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(LoadQaService(dir_ / "missing", "qa").ok());
}

TEST_F(QaServiceTest, RunsInsideTheEngineStepsAndFailsOnceTheEngineStops) {
  testing::DecodingEngine running(64, 40);  // a running decode beside the QA request
  service::QaServiceOptions o;
  o.engine = &running.engine();
  auto service = LoadQaService(dir_.path(), "qa", o);
  ASSERT_TRUE(service.ok());
  auto answer = (*service)->Answer(Request("where", context_));
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_FALSE(answer->answers.empty());
  EXPECT_GT(running.engine().stats().encoder_tokens.load(), 0u);
  EXPECT_EQ(running.FinishDecode(), 40u);
  running.engine().Stop();
  EXPECT_EQ((*service)->Answer(Request("where", context_)).status().code(), ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace ropeserve
