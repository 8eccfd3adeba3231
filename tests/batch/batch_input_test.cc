// Batch input files (JSONL) checked on upload: every bad line named, the
// body read by its endpoint's reader (a stand-in here), limits.
#include "server/batch/batch_input.h"

#include <gtest/gtest.h>

#include <string>

namespace ropeserve {
namespace {

// A stand-in for the endpoint readers: a body needs "ok": true.
Status NeedsOk(const std::string& url, const std::string& body) {
  if (body.find("\"ok\":true") == std::string::npos) return Status(InvalidArgument("not ok")).WithParam("ok");
  return url.empty() ? Internal("no url") : Status::Ok();
}

std::string Line(const std::string& id, const std::string& url = "/v1/chat/completions",
                 const std::string& body = R"({"ok":true})") {
  return R"({"custom_id":")" + id + R"(","method":"POST","url":")" + url + R"(","body":)" + body + "}";
}

TEST(BatchInput, ReadsEveryRequestWithItsLineNumber) {
  const std::string file = Line("a") + "\n\n" + Line("b", "/v1/summarize") + "\r\n" + Line("c", "/v1/qa");
  auto lines = batch::ReadBatchInput(file, {}, &NeedsOk);
  ASSERT_TRUE(lines.ok()) << lines.status().ToString();
  ASSERT_EQ(lines->size(), 3u);
  EXPECT_EQ((*lines)[0].custom_id, "a");
  EXPECT_EQ((*lines)[1].number, 3u);  // the blank line counts
  EXPECT_EQ((*lines)[1].url, "/v1/summarize");
  EXPECT_EQ((*lines)[2].body, R"({"ok":true})");
}

TEST(BatchInput, NamesEveryBadLine) {
  const std::string file = Line("a") + "\n" +                                        // 1 fine
                           Line("a") + "\n" +                                        // 2 duplicate
                           Line("b", "/v1/embeddings") + "\n" +                      // 3 endpoint
                           "{not json\n" +                                           // 4
                           Line("c", "/v1/completions", R"({"ok":false})") + "\n" +  // 5 body
                           R"({"custom_id":"d","method":"GET","url":"/v1/qa","body":{}})"
                           "\n" +                                                                  // 6
                           R"({"custom_id":"e","method":"POST","url":"/v1/qa","body":{},"x":1})";  // 7
  auto lines = batch::ReadBatchInput(file, {}, &NeedsOk);
  ASSERT_FALSE(lines.ok());
  const std::string m = lines.status().message();
  EXPECT_EQ(lines.status().param(), "file");
  EXPECT_NE(m.find("6 bad lines"), std::string::npos) << m;
  EXPECT_NE(m.find("line 2: custom_id 'a' is already used by line 1"), std::string::npos) << m;
  EXPECT_NE(m.find("line 3: 'url' must be one of"), std::string::npos) << m;
  EXPECT_NE(m.find("line 4: "), std::string::npos) << m;
  EXPECT_NE(m.find("line 5: body.ok: not ok"), std::string::npos) << m;
  EXPECT_NE(m.find("line 6: 'method'"), std::string::npos) << m;
  EXPECT_NE(m.find("line 7: unknown field 'x'"), std::string::npos) << m;
  EXPECT_EQ(m.find("line 1:"), std::string::npos) << m;
}

TEST(BatchInput, KeepsItsLimits) {
  batch::BatchInputLimits limits;
  limits.max_lines = 2;
  limits.max_line_bytes = 200;
  EXPECT_TRUE(batch::ReadBatchInput(Line("a") + "\n" + Line("b"), limits, &NeedsOk).ok());
  auto many = batch::ReadBatchInput(Line("a") + "\n" + Line("b") + "\n" + Line("c"), limits, &NeedsOk);
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("more than 2 requests"), std::string::npos);
  auto long_line = batch::ReadBatchInput(Line("a", "/v1/qa", R"({"ok":true,"pad":")" + std::string(300, 'x') + "\"}"),
                                         limits, &NeedsOk);
  ASSERT_FALSE(long_line.ok());
  EXPECT_NE(long_line.status().message().find("line 1: the line has"), std::string::npos);
  EXPECT_FALSE(batch::ReadBatchInput("", limits, &NeedsOk).ok());
  EXPECT_FALSE(batch::ReadBatchInput("\n \n", limits, &NeedsOk).ok());
  // Many bad lines: ten are named, the rest counted.
  std::string bad;
  for (int i = 0; i < 25; ++i) bad += "x\n";
  batch::BatchInputLimits roomy;
  auto r = batch::ReadBatchInput(bad, roomy, &NeedsOk);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("and 15 more bad lines"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace ropeserve
