// The generated-JSON scanner: member and element texts exactly as written,
// whatever strings, escapes, nesting and spacing they hold.
#include "server/service/json_spans.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ropeserve::service {
namespace {

TEST(JsonSpans, ObjectMembersAreTheValuesAsWritten) {
  const std::string text =
      " { \"a\" : 577788755521755200000000000 ,\"b\":{\"x\": [1, \"]}\\\"\"]},\n"
      "\"c\\u00e9\":\"Z\\u00fcrich \\\"q\\\"\",\"d\":-0.1000000000000000055511151231257827e-3,\"e\":[ ],\"f\":null} ";
  auto m = JsonObjectMembers(text);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->size(), 6u);
  EXPECT_EQ((*m)[0].first, "a");
  EXPECT_EQ((*m)[0].second, "577788755521755200000000000");
  EXPECT_EQ((*m)[1].second, "{\"x\": [1, \"]}\\\"\"]}");
  EXPECT_EQ((*m)[2].first, "c\xc3\xa9");  // the key decoded
  EXPECT_EQ((*m)[2].second, "\"Z\\u00fcrich \\\"q\\\"\"");
  EXPECT_EQ((*m)[3].second, "-0.1000000000000000055511151231257827e-3");
  EXPECT_EQ((*m)[4].second, "[ ]");
  EXPECT_EQ((*m)[5].second, "null");
  EXPECT_TRUE(JsonObjectMembers("{}")->empty());
  EXPECT_TRUE(JsonObjectMembers(" {\n} ")->empty());
}

TEST(JsonSpans, ArrayElementsAreTheElementsAsWritten) {
  auto e = JsonArrayElements(R"([ {"name":"f","arguments":{"a":1}} , "x,]", 12345678901234567890123, true ])");
  ASSERT_TRUE(e);
  ASSERT_EQ(e->size(), 4u);
  EXPECT_EQ((*e)[0], R"({"name":"f","arguments":{"a":1}})");
  EXPECT_EQ((*e)[1], R"("x,]")");
  EXPECT_EQ((*e)[2], "12345678901234567890123");
  EXPECT_EQ((*e)[3], "true");
  EXPECT_TRUE(JsonArrayElements("[]")->empty());
}

TEST(JsonSpans, OtherValuesAndInvalidTextGiveNothing) {
  EXPECT_FALSE(JsonObjectMembers("[1]"));
  EXPECT_FALSE(JsonObjectMembers("\"{}\""));
  EXPECT_FALSE(JsonArrayElements("{}"));
  EXPECT_FALSE(JsonArrayElements(""));
  for (const std::string& bad :
       std::vector<std::string>{"{", "{\"a\"", "{\"a\":", "{\"a\":1", "{\"a\" 1}", "[1,", "[\"x", "{1:2}", "{\"a\\\"}",
                                "{\"a\":1,}", "[1,]", "{} {}", "[1] x"}) {
    EXPECT_FALSE(JsonObjectMembers(bad)) << bad;
    EXPECT_FALSE(JsonArrayElements(bad)) << bad;
    EXPECT_FALSE(IsJsonText(bad)) << bad;
  }
}

// IsJsonText agrees with nlohmann's parser on valid and invalid texts, and
// also takes numbers too large for a double (which nlohmann refuses).
TEST(JsonSpans, ValidityAgreesWithTheJsonLibrary) {
  const std::vector<std::string> texts = {"0",
                                          "-0",
                                          "1.5e-3",
                                          "-12.0E+2",
                                          "true",
                                          "false",
                                          "null",
                                          "\"\"",
                                          " [ ] ",
                                          "{\"a\":[{\"b\":null}]}",
                                          "\"\\u00e9\\n\\t\\\"\\\\\\/\\b\\f\\r\"",
                                          "\"Z\xc3\xbcrich \xf0\x9f\x98\x80\"",
                                          "01",
                                          "1.",
                                          ".5",
                                          "-",
                                          "+1",
                                          "1e",
                                          "1e+",
                                          "tru",
                                          "nul",
                                          "[1 2]",
                                          "{\"a\":1 \"b\":2}",
                                          "\"\\x\"",
                                          "\"\\u12g4\"",
                                          "\"a\nb\"",
                                          "\"\x01\"",
                                          "\"\xff\"",
                                          "\"\xc0\xaf\"",
                                          "\"\xed\xa0\x80\"",
                                          "\"\xf4\x90\x80\x80\"",
                                          "\"\xe2\x82\"",
                                          "[1,,2]",
                                          "{,}",
                                          "'a'"};
  for (const auto& t : texts) EXPECT_EQ(IsJsonText(t), !nlohmann::json::parse(t, nullptr, false).is_discarded()) << t;
  const std::string huge(400, '7');
  EXPECT_TRUE(nlohmann::json::parse(huge, nullptr, false).is_discarded());  // why the scanner exists
  EXPECT_TRUE(IsJsonText(huge));
  EXPECT_TRUE(IsJsonText("{\"a\":" + huge + ".5e99999}"));
  const std::string negative = "{\"a\":-" + huge + "}";
  auto m = JsonObjectMembers(negative);
  ASSERT_TRUE(m);
  EXPECT_EQ((*m)[0].second, "-" + huge);
}

TEST(JsonSpans, DepthIsBoundedAndStringsDecode) {
  EXPECT_TRUE(IsJsonText(std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']')));
  EXPECT_FALSE(IsJsonText(std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']')));
  EXPECT_FALSE(IsJsonText(std::string(1000000, '[')));  // no stack overflow
  EXPECT_EQ(JsonStringValue("\"a\\u00e9\\\"\""), std::optional<std::string>("a\xc3\xa9\""));
  EXPECT_FALSE(JsonStringValue("\"a\" "));
  EXPECT_FALSE(JsonStringValue("1"));
}

}  // namespace
}  // namespace ropeserve::service
